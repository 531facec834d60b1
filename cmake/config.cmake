# kb_tvm: config.cmake fragment for building Apache TVM 0.27 from source with CUDA + LLVM,
# for platforms without a suitable apache-tvm wheel (e.g. aarch64 + CUDA, or another CUDA).
#
#   git clone --recursive --branch v0.27.0 https://github.com/apache/tvm && cd tvm
#   mkdir build && cp /path/to/kb_tvm/cmake/config.cmake build/ && cd build
#   cmake .. -G Ninja && ninja                       # ~30-60 min on 16 cores
#   pip install ../python   # then: pip install --no-deps /path/to/kb_tvm
#
# Keep apache-tvm-ffi at 0.1.14.post0: with 0.1.15.* tvm.ir.save_json segfaults, which
# crashes every MetaSchedule database write.

set(USE_CUDA ON)            # or /usr/local/cuda-12.x to pick a toolkit
set(USE_NVRTC OFF)
set(USE_CUBLAS ON)          # lets Relax offload GEMMs that tuning does not cover
set(USE_CUDNN OFF)
set(USE_CUTLASS OFF)        # not used by MetaSchedule; saves a long build
set(USE_LLVM "llvm-config --ignore-libllvm --link-static")  # host codegen; llvm 15..19
set(HIDE_PRIVATE_SYMBOLS ON)
set(USE_RPC ON)             # RPCRunner: measure on remote GPUs through a tracker
set(USE_PROFILER ON)
set(USE_OPENMP gnu)
set(USE_GTEST OFF)
set(USE_LIBBACKTRACE AUTO)
set(SUMMARIZE ON)
