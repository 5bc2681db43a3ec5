// CUDA C++ twin of kernels/add_mul_act.py: y = act(out + bias + multiplier * lora_out).
//
// out, lora_out: [rows, cols] with unit column stride (row strides ld_out, ld_lora); bias: [cols]
// or null; y: contiguous [rows, cols]. Built by fusedmlp.ops.add_mul_act with
// torch.utils.cpp_extension.load_inline on first use.
//
// Each thread owns VEC adjacent columns (16 bytes of 16-bit data: one vector load per input)
// and walks rows with a stride of gridDim.y, so its bias values are loaded once. VEC > 1 needs
// cols % VEC == 0 and 16-byte aligned rows; the host checks that, else VEC = 1. Math in fp32.
// The activation is a runtime switch: uniform across the grid, so it costs no divergence.

#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

enum Act { kIdentity = 0, kRelu, kSquaredRelu, kGelu, kGeluTanh, kSigmoid, kSilu };

__device__ __forceinline__ float apply_act(float z, int act) {
  switch (act) {
    case kRelu: return z > 0.f ? z : 0.f;
    case kSquaredRelu: { float r = z > 0.f ? z : 0.f; return r * r; }
    case kGelu: return 0.5f * z * (1.f + erff(z * 0.70710678118654752f));
    case kGeluTanh: {
      float u = 0.7978845608028654f * z * (1.f + 0.044715f * z * z);
      return 0.5f * z * (1.f + tanhf(u));
    }
    case kSigmoid: return 1.f / (1.f + __expf(-z));
    case kSilu: return z / (1.f + __expf(-z));
    default: return z;
  }
}

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack { T v[VEC]; };

template <typename T, int VEC>
__global__ void add_mul_act_kernel(const T* __restrict__ out, const T* __restrict__ bias,
                                   const T* __restrict__ lora, T* __restrict__ y, float multiplier,
                                   int64_t rows, int64_t cols, int64_t ld_out, int64_t ld_lora, int act) {
  const int64_t col = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (col >= cols) return;
  float b[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) b[v] = (bias != nullptr && col + v < cols) ? static_cast<float>(bias[col + v]) : 0.f;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    if (VEC > 1) {
      const Pack<T, VEC> o = *reinterpret_cast<const Pack<T, VEC>*>(out + r * ld_out + col);
      const Pack<T, VEC> l = *reinterpret_cast<const Pack<T, VEC>*>(lora + r * ld_lora + col);
      Pack<T, VEC> result;
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        float z = static_cast<float>(o.v[v]) + b[v] + multiplier * static_cast<float>(l.v[v]);
        result.v[v] = static_cast<T>(apply_act(z, act));
      }
      *reinterpret_cast<Pack<T, VEC>*>(y + r * cols + col) = result;
    } else {
      float z = static_cast<float>(out[r * ld_out + col]) + b[0] + multiplier * static_cast<float>(lora[r * ld_lora + col]);
      y[r * cols + col] = static_cast<T>(apply_act(z, act));
    }
  }
}

template <typename T, int VEC>
void launch(const torch::Tensor& out, const c10::optional<torch::Tensor>& bias, const torch::Tensor& lora,
            torch::Tensor& y, double multiplier, int act) {
  const int64_t rows = out.size(0), cols = out.size(1);
  const int threads = 256;
  const int64_t grid_x = (cols + (int64_t)threads * VEC - 1) / ((int64_t)threads * VEC);
  // enough row-blocks to fill the GPU several times over; each walks rows with this stride
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t grid_y = std::max<int64_t>(1, std::min<int64_t>({rows, 65535, (int64_t)sms * 32 / std::max<int64_t>(grid_x, 1) + 1}));
  const T* bias_ptr = bias.has_value() ? reinterpret_cast<const T*>(bias->data_ptr()) : nullptr;
  add_mul_act_kernel<T, VEC><<<dim3(grid_x, grid_y), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const T*>(out.data_ptr()), bias_ptr, reinterpret_cast<const T*>(lora.data_ptr()),
      reinterpret_cast<T*>(y.data_ptr()), static_cast<float>(multiplier), rows, cols, out.stride(0), lora.stride(0), act);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void dispatch_vec(const torch::Tensor& out, const c10::optional<torch::Tensor>& bias, const torch::Tensor& lora,
                  torch::Tensor& y, double multiplier, int act) {
  constexpr int kVec = 16 / sizeof(T);
  auto aligned = [](const torch::Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && (t.stride(0) * (int64_t)sizeof(T)) % 16 == 0;
  };
  bool vectorised = out.size(1) % kVec == 0 && aligned(out) && aligned(lora) && aligned(y) &&
                    (!bias.has_value() || reinterpret_cast<uintptr_t>(bias->data_ptr()) % 16 == 0);
  if (vectorised) launch<T, kVec>(out, bias, lora, y, multiplier, act);
  else launch<T, 1>(out, bias, lora, y, multiplier, act);
}

}  // namespace

torch::Tensor add_mul_act(torch::Tensor out, c10::optional<torch::Tensor> bias, torch::Tensor lora,
                          double multiplier, int64_t act) {
  TORCH_CHECK(out.is_cuda() && lora.is_cuda(), "add_mul_act: CUDA tensors expected");
  TORCH_CHECK(out.dim() == 2 && lora.sizes() == out.sizes(), "add_mul_act: out and lora_out must be the same 2-D shape");
  TORCH_CHECK(out.stride(1) == 1 && lora.stride(1) == 1, "add_mul_act: unit column stride expected");
  const c10::cuda::CUDAGuard guard(out.device());
  auto y = torch::empty(out.sizes(), out.options());
  if (out.numel() == 0) return y;
  switch (out.scalar_type()) {
    case at::kFloat: dispatch_vec<float>(out, bias, lora, y, multiplier, (int)act); break;
    case at::kHalf: dispatch_vec<at::Half>(out, bias, lora, y, multiplier, (int)act); break;
    case at::kBFloat16: dispatch_vec<at::BFloat16>(out, bias, lora, y, multiplier, (int)act); break;
    default: TORCH_CHECK(false, "add_mul_act: float32, float16 or bfloat16 expected, got ", out.scalar_type());
  }
  return y;
}
