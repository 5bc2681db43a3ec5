#!/usr/bin/env bash
# unpack the carried Triton 3.7 (its ptxas is 3.6's byte for byte: taken from the image) and 3.8 (two parts over two calls)
set -u
mkdir -p /tmp/parts
[ -f tw1/t370np.tar.xz ] && [ ! -d /tmp/t37/triton ] && {
  echo "t37 tar $(sha256sum tw1/t370np.tar.xz | cut -c1-16)"
  mkdir -p /tmp/t37 && tar xJf tw1/t370np.tar.xz -C /tmp/t37
  img=$(python3 -c "import triton,os;print(os.path.dirname(triton.__file__))")/backends/nvidia/bin/ptxas
  echo "image ptxas $(sha256sum $img | cut -c1-16) (3.7.0's: c960a4f238b17d5c)"
  cp $img /tmp/t37/triton/backends/nvidia/bin/ptxas
}
for d in tw2 tw3; do [ -d $d ] && cp $d/t38.p.* /tmp/parts/ 2>/dev/null; done
if [ ! -d /tmp/t38/triton ] && [ -f /tmp/parts/t38.p.00 ] && [ -f /tmp/parts/t38.p.01 ]; then
  cat /tmp/parts/t38.p.00 /tmp/parts/t38.p.01 > /tmp/t38.tar.xz
  echo "t38 tar $(sha256sum /tmp/t38.tar.xz | cut -c1-16)"
  mkdir -p /tmp/t38 && tar xJf /tmp/t38.tar.xz -C /tmp/t38
fi
for t in t37 t38; do [ -d /tmp/$t/triton ] && TRITON_BACKENDS_IN_TREE=1 PYTHONPATH=/tmp/$t python3 -c "import triton; print('$t ok', triton.__version__)"; done
true
