# after call 1 left /tmp/qk/*.whl and /tmp/qk/cu13part00; this call carries .qk (part 2, tvm-ffi, dlpack-ext)
set -e
mkdir -p /tmp/q/site-packages
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/q/site-packages /tmp/qk/*.whl .qk/*.whl
cat /tmp/qk/cu13part00 .qk/cu13part01 > /tmp/cu13.tar.zst
cd /tmp/q/site-packages
if command -v zstd >/dev/null; then zstd -q -d --long=28 -c /tmp/cu13.tar.zst | tar xf -; else
  PYTHONPATH=/tmp/q/site-packages python3 -c "import zstandard,sys; zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(open('/tmp/cu13.tar.zst','rb'), sys.stdout.buffer)" | tar xf -; fi
cd - >/dev/null
rm -f /tmp/cu13.tar.zst
ls /tmp/q/site-packages
