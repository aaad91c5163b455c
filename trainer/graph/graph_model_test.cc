// Tests that torchvision models exported by tools/export_model.py train in Stoker as they do
// in PyTorch (torchvision_check.h: first step, three SGD steps, the exported weights in
// torchvision), with and without the fused-block rewrite, and that the rewrite fuses the
// blocks it should. Models with dropout or stochastic depth are exported with them off
// (graph_random_test.cc tests random ops); torchvision_zoo_test.cc covers every torchvision
// classifier.
#include <algorithm>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "trainer/graph/graph_model.h"
#include "trainer/graph/torchvision_check.h"

namespace stoker::trainer {
namespace {

struct Case {
  const char* arch;  // torchvision.models.<arch>: a model builder or a model class
  int image_size;
  const char* kwargs;        // JSON: dropout and stochastic depth off, ViT's image size
  bool fused_blocks = true;  // the program's fused-block rewrite (the CPU runs its composition)
  // The rewrite's expected {batch norm alone, batch norm + ReLU, batch norm + add + ReLU, max
  // pool, self-attention, layer norm read by matrix products, the same through views, layer
  // norm with fp32 output} counts in the training program; -1: not checked.
  int fused[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  // Every torchvision.ops.StochasticDepth's p set to 0 (Swin's builders fix it themselves).
  bool zero_stochastic_depth = false;
};

constexpr int kBatch = 4;

class TorchvisionExportTest : public ::testing::TestWithParam<Case> {};

TEST_P(TorchvisionExportTest, TrainsAsInPyTorchAndExportsWeightsTorchvisionLoads) {
  const Case& c = GetParam();
  absl::StatusOr<TorchvisionExport> exported =
      ExportTorchvisionModel({c.arch, c.image_size, c.kwargs, kBatch, c.zero_stochastic_depth});
  ASSERT_TRUE(exported.ok()) << exported.status();

  absl::StatusOr<std::shared_ptr<GraphModel>> loaded =
      GraphModel::Load(exported->archive, {kTorchvisionClasses, c.image_size, c.fused_blocks});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  GraphModel& model = **loaded;
  EXPECT_TRUE(model.has_eval_program());
  const FusedBlockCounts& fused = model.train_program().fused_blocks();
  std::cerr << c.arch << ": fused blocks " << fused.batch_norm << " batch norm alone, "
            << fused.batch_norm_relu << " batch norm + ReLU, " << fused.batch_norm_add_relu
            << " batch norm + add + ReLU, " << fused.max_pool << " max pool, "
            << fused.self_attention << " self-attention, " << fused.layer_norm << " layer norm, "
            << fused.layer_norm_through_views << " layer norm through views, "
            << fused.layer_norm_fp32_output << " layer norm with fp32 output\n";
  if (!c.fused_blocks) {
    EXPECT_EQ(fused.batch_norm + fused.batch_norm_relu + fused.batch_norm_add_relu +
                  fused.max_pool + fused.self_attention + fused.layer_norm +
                  fused.layer_norm_through_views + fused.layer_norm_fp32_output,
              0);
  } else if (c.fused[0] >= 0) {
    EXPECT_EQ(fused.batch_norm, c.fused[0]);
    EXPECT_EQ(fused.batch_norm_relu, c.fused[1]);
    EXPECT_EQ(fused.batch_norm_add_relu, c.fused[2]);
    EXPECT_EQ(fused.max_pool, c.fused[3]);
    EXPECT_EQ(fused.self_attention, c.fused[4]);
    EXPECT_EQ(fused.layer_norm, c.fused[5]);
    EXPECT_EQ(fused.layer_norm_through_views, c.fused[6]);
    EXPECT_EQ(fused.layer_norm_fp32_output, c.fused[7]);
  }
  ExpectTrainsAsInPyTorch(*exported, model);
}

INSTANTIATE_TEST_SUITE_P(
    Torchvision, TorchvisionExportTest,
    // A ResNet's stem and each block's inner batch norms end in ReLU, each block's last one
    // in add + ReLU; the downsample branches' batch norms are fused alone.
    ::testing::Values(Case{"resnet18", 32, "{}", true, {3, 9, 8, 1, 0, 0, 0, 0}},
                      Case{"resnet18", 32, "{}", false},
                      Case{"resnet50", 32, "{}", true, {4, 33, 16, 1, 0, 0, 0, 0}},
                      Case{"mobilenet_v3_small", 32, R"({"dropout": 0.0})"},
                      Case{"efficientnet_b0", 32,
                           R"({"dropout": 0.0, "stochastic_depth_prob": 0.0})"},
                      // ConvNeXt's blocks norm the depthwise convolution's output for a
                      // linear layer, its LayerNorm2d (the three downsamplings and the
                      // classifier) reach a convolution or linear layer through permutes
                      // and flatten; the stem's norm is also the first block's residual.
                      Case{"convnext_tiny",
                           32,
                           R"({"stochastic_depth_prob": 0.0})",
                           true,
                           {0, 0, 0, 0, 0, 18, 4, 1}},
                      // Swin-V2's norms come after the attention and the MLP, read by the
                      // residual add (and the patch embedding's, the patch merging's and
                      // the last one by the next stage or the pooling): fp32 output.
                      Case{"swin_v2_t", 32, "{}", true, {0, 0, 0, 0, 0, 0, 0, 29}, true},
                      // vit_b_16's class with fewer and narrower layers: the same
                      // operations in a model a thousand times smaller, each layer's
                      // attention one kSelfAttention call and both its layer norms
                      // kLayerNorm calls (the encoder's last one feeds no matrix product:
                      // fp32 output).
                      Case{"VisionTransformer",
                           32,
                           R"({"image_size": 32, "patch_size": 8, "num_layers": 2,
                               "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128})",
                           true,
                           {0, 0, 0, 0, 2, 4, 0, 1}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(info.param.arch, info.param.fused_blocks ? "" : "_unfused");
    });

// Note [FP8 linear layers in a program]: with fp8 the training program's linear layers and
// self-attention calls are marked, the head kept; on the CPU the marked program trains as
// PyTorch does (its calls run at::linear), and evaluation is not marked.
struct Fp8Case {
  const char* arch;
  const char* kwargs;
  bool fused_blocks;
  int fp8_linear, fp8_self_attention, fp8_kept;
  bool train;  // also check ExpectTrainsAsInPyTorch
};

class Fp8MarkingTest : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8MarkingTest, MarksLinearsAndSelfAttentionKeepingTheHead) {
  const Fp8Case& c = GetParam();
  absl::StatusOr<TorchvisionExport> exported =
      ExportTorchvisionModel({c.arch, 32, c.kwargs, kBatch});
  ASSERT_TRUE(exported.ok()) << exported.status();
  GraphModelOptions options{kTorchvisionClasses, 32, c.fused_blocks};
  options.fp8 = true;
  absl::StatusOr<std::shared_ptr<GraphModel>> loaded = GraphModel::Load(exported->archive, options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const GraphProgram& program = (*loaded)->train_program();
  const FusedBlockCounts& counts = program.fused_blocks();
  std::cerr << c.arch << (c.fused_blocks ? "" : " (unfused)") << ": FP8 " << counts.fp8_linear
            << " linear, " << counts.fp8_self_attention << " self-attention, kept "
            << counts.fp8_kept << "\n";
  for (const std::string& line : program.fp8_kept()) std::cerr << "  kept: " << line << "\n";
  EXPECT_EQ(counts.fp8_linear, c.fp8_linear);
  EXPECT_EQ(counts.fp8_self_attention, c.fp8_self_attention);
  EXPECT_EQ(counts.fp8_kept, c.fp8_kept);
  ASSERT_EQ(program.fp8_kept().size(), static_cast<size_t>(c.fp8_kept));
  EXPECT_NE(program.fp8_kept().back().find("classification head"), std::string::npos)
      << program.fp8_kept().back();
  if (c.train) ExpectTrainsAsInPyTorch(*exported, **loaded);
}

constexpr char kSmallVit[] = R"({"image_size": 32, "patch_size": 8, "num_layers": 2,
                                 "num_heads": 4, "hidden_dim": 64, "mlp_dim": 128})";

INSTANTIATE_TEST_SUITE_P(
    Transformers, Fp8MarkingTest,
    // Per encoder layer: the self-attention's two projections (one kSelfAttention call when
    // fused, two linear layers otherwise) and the MLP's two linear layers; the head is kept.
    ::testing::Values(Fp8Case{"VisionTransformer", kSmallVit, true, 4, 2, 1, true},
                      Fp8Case{"VisionTransformer", kSmallVit, false, 8, 0, 1, true},
                      Fp8Case{"vit_b_16", R"({"image_size": 32})", true, 24, 12, 1, false}),
    [](const ::testing::TestParamInfo<Fp8Case>& info) {
      return absl::StrCat(info.param.arch, info.param.fused_blocks ? "" : "_unfused");
    });

// Note [FP8 linear layers in a program]: each FP8 layer's scaling state is named after its
// weight, the same in every load of the model; `to` makes it on the device, sized by the
// recipe; it is not part of the state dict.
TEST(Fp8StateNamesTest, EachStateIsNamedAfterItsWeightTheSameInEveryLoad) {
  absl::StatusOr<TorchvisionExport> exported =
      ExportTorchvisionModel({"VisionTransformer", 32, kSmallVit, kBatch});
  ASSERT_TRUE(exported.ok()) << exported.status();
  GraphModelOptions options{kTorchvisionClasses, 32, /*fused_blocks=*/true};
  options.fp8 = true;
  options.fp8_recipe.history = 8;
  std::vector<std::vector<std::string>> loads;
  for (int load = 0; load < 2; ++load) {
    absl::StatusOr<std::shared_ptr<GraphModel>> model =
        GraphModel::Load(exported->archive, options);
    ASSERT_TRUE(model.ok()) << model.status();
    std::set<std::string> parameters;
    for (const auto& item : (*model)->named_parameters()) parameters.insert(item.key());
    const auto states = (*model)->Fp8States();
    // Per encoder layer (2): the self-attention's two projections and the MLP's two layers.
    ASSERT_EQ(states.size(), 8u);
    std::vector<std::string> names;
    for (const auto& state : states) {
      EXPECT_TRUE(parameters.count(state->name()) > 0) << state->name() << " is no parameter";
      EXPECT_FALSE(state->scaling().defined()) << "made before the model is placed";
      names.push_back(state->name());
    }
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size())
        << "names repeat";
    EXPECT_NE(
        std::find_if(names.begin(), names.end(),
                     [](const std::string& n) { return absl::EndsWith(n, "in_proj_weight"); }),
        names.end());
    (*model)->to(torch::kCPU);
    for (const auto& state : states) {
      ASSERT_TRUE(state->scaling().defined()) << state->name();
      EXPECT_EQ(state->scaling().sizes().vec(), (std::vector<int64_t>{3, 11}));
    }
    for (const auto& item : (*model)->named_buffers()) {
      EXPECT_FALSE(absl::StrContains(item.key(), "fp8")) << item.key();
    }
    loads.push_back(names);
  }
  EXPECT_EQ(loads[0], loads[1]);
  for (const std::string& name : loads[0]) std::cerr << "  FP8 state: " << name << "\n";
}

TEST(Fp8StateNamesTest, AModelWithoutFp8HasNoState) {
  absl::StatusOr<TorchvisionExport> exported =
      ExportTorchvisionModel({"VisionTransformer", 32, kSmallVit, kBatch});
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<std::shared_ptr<GraphModel>> model =
      GraphModel::Load(exported->archive, GraphModelOptions{kTorchvisionClasses, 32, true});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->Fp8States().empty());
}

}  // namespace
}  // namespace stoker::trainer
