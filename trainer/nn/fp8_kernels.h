// The CUDA kernels behind fp8_linear.h: the cast of a matrix to FP8 with its per-tensor
// scale (and its transpose, and its amax, in the same pass), and the update of delayed
// scaling's amax histories and scales. Every function enqueues on `stream`, takes device
// pointers, reads its scale from the device (never the host: no synchronisation, so the
// launches can be captured in a CUDA graph) and returns the first launch error.
#ifndef STOKER_TRAINER_NN_FP8_KERNELS_H_
#define STOKER_TRAINER_NN_FP8_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/element_type.h"

namespace stoker::trainer {

enum class Fp8Format { kE4M3, kE5M2 };

// The largest finite value of `format`: 448 (e4m3) or 57344 (e5m2).
inline float Fp8MaxValue(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.f : 57344.f; }

// One matrix to cast: `x` [rows, cols] row-major (fp32, fp16 or bf16; 16-byte aligned,
// cols a multiple of 8).
struct Fp8CastArguments {
  const void* x = nullptr;
  ElementType type = ElementType::kBFloat16;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* scale = nullptr;  // one value: q = saturate(x * scale)
  Fp8Format format = Fp8Format::kE4M3;
  uint8_t* q = nullptr;  // [rows, cols], or null
  // [cols, padded_rows] (the transpose, zero past `rows`), or null. padded_rows is a multiple
  // of 16 and at least rows.
  uint8_t* qt = nullptr;
  int64_t padded_rows = 0;
  // max |x| over the matrix is folded in with an atomic max (NaN above every number). The
  // value there must be a finite float >= 0 (LaunchFp8ScaleUpdate leaves 0).
  float* amax = nullptr;
  float* scale_inv = nullptr;  // where not null: 1 / scale, the factor a product undoes q by
};

// The cast (q and qt both null: the amax alone).
cudaError_t LaunchFp8Cast(const Fp8CastArguments& args, cudaStream_t stream);

// Delayed scaling's state of one tensor role: a row of `history + 3` floats: the amax
// history (newest first), the amax accumulated since the last update, the scale and its
// inverse. Rows of consecutive roles are consecutive.
inline int64_t Fp8ScalingRowFloats(int history) { return history + 3; }

// For each of `roles` consecutive rows from `first_row` of `scaling`: shifts the history by
// one, puts the accumulated amax first (0 when it is not finite), resets the accumulator to
// 0 and, when the history's maximum m is finite and above 0, sets scale = max_value[row] /
// (m * 2^margin) and its inverse (else keeps them). history <= 1024, roles <= 3.
cudaError_t LaunchFp8ScaleUpdate(float* scaling, int history, int first_row, int roles,
                                 const float max_value[3], int margin, cudaStream_t stream);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_NN_FP8_KERNELS_H_
