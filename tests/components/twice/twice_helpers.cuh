// The helper tests/components/twice/twice.cu inlines (one header, one line, for both instances of the package).
static __device__ __forceinline__ void stage_one(unsigned char* buf, int i, float v) {
  reinterpret_cast<float*>(buf)[i] = v;
}
