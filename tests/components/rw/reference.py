def appended(inputs, facts):
    cache = inputs["append.cache"].clone()
    cache[facts["L"]] = inputs["append.x"]
    return {"append.cache": cache}
