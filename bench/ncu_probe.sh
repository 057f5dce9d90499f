export PYTHONPATH=$PWD/src PIPELINK_CACHE_DIR=/tmp/c
python3 - <<'PY'
import shutil, pipelink, pathlib
from rich.console import Console
d = pathlib.Path("/tmp/p"); (d/"packages").mkdir(parents=True, exist_ok=True)
for n in ("ring_producer","ring_reduce","tile_store"):
    pipelink.pack(f"components/raw/{n}.cu", f"components/raw/{n}.toml", d/"packages"/f"{n}.plc")
for f in ("link.toml","reference.py"): shutil.copyfile(f"examples/demo/{f}", d/f)
r = pipelink.verify(d/"link.toml", out_dir=d/"run", bench=False, profile=True, console=Console(width=150))
print(r.rung("profile"))
PY
tail -30 /tmp/p/run/profile/ncu.log
ls -la /tmp/p/run/profile
