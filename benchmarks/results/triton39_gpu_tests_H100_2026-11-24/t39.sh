#!/usr/bin/env bash
# reassemble Triton 3.9 (carried in three parts over three calls) and check it imports
set -u
REPO=$PWD
cp tw3/xpart.02 /tmp/t39parts/
cd /tmp/t39parts && cat xpart.00 xpart.01 xpart.02 > /tmp/t39.tar.xz && sha256sum /tmp/t39.tar.xz
python3 -c "import tarfile; tarfile.open('/tmp/t39.tar.xz','r:xz').extractall('/tmp/t39')"
cd "$REPO"
PYTHONPATH=/tmp/t39 python3 -c "import triton, torch; print('triton', triton.__version__, triton.__file__, 'torch', torch.__version__)"
