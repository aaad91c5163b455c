#!/usr/bin/env bash
# Packs Stoker for a GPU host that has torch, CUDA, NCCL and Open MPI but no Bazel:
#   bundle/bin/   the three programs, the GPU test binaries, and gpu.sh: the entry point for
#                 the GPU checks, smoke runs, benchmarks and kernel profiles (with the
#                 scripts it runs)
#   bundle/lib/   the shared libraries such a host lacks (Abseil, libturbojpeg, and the
#                 test binaries' Bazel-built libraries), found with ldd
#   bundle/stoker the program runner: `bundle/stoker PROGRAM ARGS...` sets the library path to
#                 the bundle, the host's torch (and the CUDA/NCCL libraries beside it),
#                 and runs bin/PROGRAM
# Usage: tools/bundle.sh [OUT_DIR]   (default: bundle/)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bundle}"
STOKER_SETUP_QUIET=1 tools/setup.sh

programs=(//launcher:launcher //trainer:trainer //data_service:data_service //data_service/dataset:pack_imagefolder //data_service:data_service_benchmark //data_service/image:transforms_benchmark)
gpu_tests=(
  //trainer/input:cuda_batch_feeder_test
  //trainer/comm:device_timeline_gpu_test
  //trainer/input:pinning_memlock_test
  //trainer/input:gpu_jpeg_decoder_gpu_test
  //common:cuda_stream_test
  //trainer/nn:fused_blocks_gpu_test
  //trainer/nn:self_attention_gpu_test
  //trainer/nn:layer_norm_gpu_test
  //trainer/nn:fp8_linear_gpu_test
  //trainer/graph:pointwise_kernel_gpu_test
  //trainer:cuda_graph_gpu_test
  //trainer/comm:nccl_communicator_test_ranks
  //trainer/comm:nccl_communicator_conformance_test_ranks
  //trainer/checkpoint:snapshot_buffers_gpu_test
)
bazel build "${programs[@]}" "${gpu_tests[@]}"
bin="$(bazel info bazel-bin 2>/dev/null)"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for target in "${programs[@]}" "${gpu_tests[@]}"; do
  path="${target#//}"; path="${path/://}"
  cp -L "$bin/$path" "$out/bin/"
done
cp tools/gpu.sh tools/gpu_checks.sh tools/trace_timeline.py tests/check_trace.py tools/bench_gpu.py tools/make_jpeg_photos.py tools/loader_bench.py tools/kernel_breakdown.py tools/profile_peer.py tools/export_model.py tests/mpi_env.sh \
  data_service/image/bench_vs_torchvision.py "$out/bin/"
# scikit-learn's digits as an image folder, for the accuracy check (the host may lack sklearn).
python3 tools/make_digits.py "$out/digits" > /dev/null
# The same digits as baseline JPEGs (quality 90), for the GPU decode accuracy checks.
python3 tools/make_digits.py "$out/digits_jpeg" --format jpeg > /dev/null
mkdir -p "$out/bin/testdata_tools" "$out/bin/tests"
cp tests/fault_gpu_stall_test.sh tests/job_checks.sh tests/mpi_env.sh "$out/bin/tests/"
cp data_service/image/testdata_tools/make_image_cases.py "$out/bin/testdata_tools/"
# The Python recipes Stoker is measured against (../shared/bench), when beside the checkout.
if [[ -d ../shared/bench ]]; then
  mkdir -p "$out/anchors"
  cp ../shared/bench/*.py "$out/anchors/"
fi

# Libraries the host lacks: everything ldd resolves outside the C/C++ runtime, torch,
# the CUDA libraries, NCCL and MPI (all of which the host has in its own versions).
# ldd runs on the built binaries, whose RUNPATH still finds Bazel's own libraries.
for target in "${programs[@]}" "${gpu_tests[@]}"; do
  exe="${target#//}"; exe="$bin/${exe/://}"
  ldd "$exe" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|libpthread*|librt.so*|libdl.so*|libutil*|ld-linux*) continue ;;
      libtorch*|libc10*|libgomp*|libcud*|libcufile*|libcublas*|libcusparse*|libcufft*|libcurand*|libcusolver*|libnvJitLink*|libnvrtc*|libnvshmem*|libnvToolsExt*|libcupti*|libnccl*) continue ;;
      libmpi*|libopen-*|libhwloc*|libevent*|libpmix*|libz.so*|libudev*|libltdl*) continue ;;
    esac
    cp -Ln "$lib" "$out/lib/" 2>/dev/null || true
  done
done

cat > "$out/stoker" <<'SH'
#!/usr/bin/env bash
# Runs a program of this bundle with the host's libtorch, CUDA runtime, NCCL and MPI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${STOKER_PYTHON:-python3}"
torch_dir="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" || {
  echo "stoker: cannot import torch with $python (set STOKER_PYTHON)" >&2; exit 1; }
site="$(dirname "$torch_dir")"
paths="$here/lib:$torch_dir/lib"
for d in nvidia/cu13/lib nvidia/nccl/lib nvidia/cudnn/lib nvidia/nvshmem/lib nvidia/cusparselt/lib; do
  [[ -d "$site/$d" ]] && paths="$paths:$site/$d"
done
export LD_LIBRARY_PATH="$paths${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# nvJPEG for deferred samples (--gpu_decode_share), loaded by the trainer at run time:
# the nvidia-nvjpeg wheel's libnvjpeg.so.13 (nvidia/cu13/lib, on the path above), else
# the copy that torchvision ships.
if [[ -z "${STOKER_NVJPEG_LIBRARY:-}" && ! -e "$site/nvidia/cu13/lib/libnvjpeg.so.13" ]]; then
  for f in "$site"/torchvision.libs/libnvjpeg*.so.13; do
    [[ -e "$f" ]] && export STOKER_NVJPEG_LIBRARY="$f" && break
  done
fi
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"
program="$1"; shift
exec "$here/bin/$program" "$@"
SH
chmod +x "$out/stoker"
echo "bundle: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/lib" | wc -l) libraries)"
