#!/usr/bin/env bash
# Prepares .deps/ (git-ignored) for a GPU machine that cannot install packages: libfabric's headers (Debian's
# libfabric-dev unpacked; the machine has the runtime) and iproute2's ip with the libraries it links, which
# dionrun --hosts needs to build its simulated network. Run here, then carry .deps to the GPU machine;
# perf/run_gpu.sh finds both there.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps && cd .deps
if [ ! -f fab/usr/include/rdma/fabric.h ]; then
  rm -f libfabric-dev_*.deb && apt-get download libfabric-dev && dpkg -x libfabric-dev_*.deb fab && rm -f libfabric-dev_*.deb
fi
IP=$(command -v ip || echo /usr/sbin/ip)
mkdir -p ip/lib && cp "$IP" ip/ip.bin
# every library ip links except the C library and the loader, which the GPU machine has (same or newer)
ldd "$IP" | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} ip/lib/
cat > ip/ip <<'EOS'
#!/bin/sh
d=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/ip.bin" "$@"
EOS
chmod +x ip/ip
echo "ready: $(ls fab/usr/include/rdma | wc -l) libfabric headers, ip with $(ls ip/lib | wc -l) libraries"
