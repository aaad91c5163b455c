// Tests the pointwise-region rewrite (Note [Pointwise regions]) on torchvision models exported
// by tools/export_model.py: the regions it finds in ConvNeXt-T, ViT-B/16 and Swin-V2-T (printed,
// with their counts), that a program with them computes on the CPU (where each region runs its
// composition) the same logits and gradients as the program without, and that the generated
// kernels of every region compile with NVRTC (pointwise_codegen.h), which needs no GPU.
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "gtest/gtest.h"
#include "trainer/graph/graph_model.h"
#include "trainer/graph/pointwise_codegen.h"
#include "trainer/graph/pointwise_region.h"
#include "trainer/graph/torchvision_check.h"

namespace stoker::trainer {
namespace {

struct Case {
  const char* arch;
  int image_size;
  const char* kwargs;
  int min_regions;  // regions the training program has at least
};

class PointwiseRegionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PointwiseRegionTest, FindsRegionsThatComputeWhatTheirCallsDid) {
  const Case& c = GetParam();
  TorchvisionModel spec;
  spec.arch = c.arch;
  spec.image_size = c.image_size;
  spec.kwargs = c.kwargs;
  spec.batch = 2;
  absl::StatusOr<TorchvisionExport> exported = ExportTorchvisionModel(spec);
  ASSERT_TRUE(exported.ok()) << exported.status();

  GraphModelOptions with;
  with.num_classes = kTorchvisionClasses;
  with.image_size = c.image_size;
  GraphModelOptions without = with;
  without.pointwise_fusion = false;
  absl::StatusOr<std::shared_ptr<GraphModel>> fused = GraphModel::Load(exported->archive, with);
  ASSERT_TRUE(fused.ok()) << fused.status();
  absl::StatusOr<std::shared_ptr<GraphModel>> plain = GraphModel::Load(exported->archive, without);
  ASSERT_TRUE(plain.ok()) << plain.status();

  const FusedBlockCounts& counts = (*fused)->train_program().fused_blocks();
  std::cerr << c.arch << ": " << counts.pointwise_regions << " pointwise regions of "
            << counts.pointwise_ops << " ops\n";
  for (const PointwiseRegion* region : (*fused)->train_program().pointwise_regions())
    std::cerr << "  " << region->op_count() << " ops: " << region->Describe() << "\n";
  EXPECT_GE(counts.pointwise_regions, c.min_regions);
  EXPECT_GE(counts.pointwise_ops, 2 * counts.pointwise_regions);
  EXPECT_EQ((*plain)->train_program().fused_blocks().pointwise_regions, 0);

  // Same weights, same seed: the same logits and gradients, op for op.
  torch::manual_seed(11);
  const at::Tensor images = at::randn({2, 3, c.image_size, c.image_size});
  at::Tensor logits[2];
  std::vector<at::Tensor> grads[2];
  GraphModel* models[2] = {fused->get(), plain->get()};
  for (int m = 0; m < 2; ++m) {
    models[m]->train();
    models[m]->SetRandomSeed(5);
    logits[m] = models[m]->forward(images);
    logits[m].square().sum().backward();
    for (const at::Tensor& p : models[m]->parameters()) grads[m].push_back(p.grad().clone());
  }
  EXPECT_TRUE(at::equal(logits[0], logits[1]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(at::equal(grads[0][i], grads[1][i]));

  // Every region's kernels compile for an H200 (sm_90), in fp32 and in bf16, with every input
  // read through strides and the live-outs' gradients given.
  int compiled = 0;
  for (const PointwiseRegion* region : (*fused)->train_program().pointwise_regions()) {
    for (c10::ScalarType dtype : {c10::ScalarType::Float, c10::ScalarType::BFloat16}) {
      const size_t inputs = region->input_slots.size();
      PointwiseSignature signature;
      signature.input_dtypes.assign(inputs, dtype);
      signature.input_zero_dim.assign(inputs, false);
      signature.input_linear.assign(inputs, false);
      signature.input_linear[0] = true;
      signature.rank = 4;
      signature.input_needs_grad.assign(inputs, true);
      signature.input_full_shape.assign(inputs, false);
      signature.input_full_shape[0] = true;
      signature.output_grad_given.assign(region->output_nodes.size(), true);
      signature.output_grad_linear.assign(region->output_nodes.size(), true);
      for (bool backward : {false, true}) {
        absl::StatusOr<std::string> source = backward ? PointwiseBackwardSource(*region, signature)
                                                      : PointwiseForwardSource(*region, signature);
        ASSERT_TRUE(source.ok()) << source.status();
        absl::StatusOr<std::string> ptx = CompilePointwiseSource(*source, 9, 0, /*cubin=*/false);
        if (absl::IsUnavailable(ptx.status())) GTEST_SKIP() << "needs NVRTC: " << ptx.status();
        ASSERT_TRUE(ptx.ok()) << ptx.status();
        EXPECT_NE(ptx->find(backward ? "pointwise_backward" : "pointwise_forward"),
                  std::string::npos);
        ++compiled;
      }
    }
  }
  std::cerr << c.arch << ": " << compiled << " kernels compiled to PTX for sm_90\n";
}

INSTANTIATE_TEST_SUITE_P(
    Torchvision, PointwiseRegionTest,
    // Stochastic depth on (the default): its masks are part of the regions. ViT-B/16's
    // elementwise calls are single ones between its matrix products and fused layer norms.
    ::testing::Values(Case{"convnext_tiny", 32, "{}", 10}, Case{"swin_v2_t", 64, "{}", 10},
                      Case{"vit_b_16", 32, R"({"image_size": 32})", 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.arch); });

}  // namespace
}  // namespace stoker::trainer
