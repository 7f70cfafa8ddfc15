// Source of the code objects beside it (see ../hiprtc_test.go): one f32 add
// kernel, compiled by Debian 12's hiprtc (HIP 5.2) with
//   add_gfx90a.hsaco:     --offload-arch=gfx90a -O3 -std=c++17 -ffp-contract=off -fno-fast-math -fno-gpu-flush-denormals-to-zero
//   add_gfx90a_ftz.hsaco: --offload-arch=gfx90a -O3 -std=c++17 -fgpu-flush-denormals-to-zero
//   add_gfx1030.hsaco:    --offload-arch=gfx1030 and the options of the first
extern "C" __global__ void detcoll_test_add(float* x, const float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}
