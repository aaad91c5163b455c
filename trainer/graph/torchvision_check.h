// Test support: checks that a torchvision classifier exported by tools/export_model.py trains
// in Stoker as it does in PyTorch. For the same weights and batch, the first training step's
// loss, every parameter's gradient and the buffers after the step equal eager PyTorch's
// (fp32), and after three SGD steps the weights Stoker exports load into the torchvision
// class with load_state_dict(strict=True) and give Stoker's evaluation logits. torchvision
// runs in one long-lived $STOKER_PYTHON process per test binary (common/testing/python_worker.h).
#ifndef STOKER_TRAINER_GRAPH_TORCHVISION_CHECK_H_
#define STOKER_TRAINER_GRAPH_TORCHVISION_CHECK_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/graph_model.h"

namespace stoker::trainer {

// torchvision.models.<arch>(num_classes=kTorchvisionClasses, **kwargs) fed `batch` images of
// `image_size` squared.
struct TorchvisionModel {
  std::string arch;
  int image_size = 32;
  std::string kwargs = "{}";  // JSON: dropout and stochastic depth off, a ViT's image size
  int batch = 4;
  // Sets every torchvision.ops.StochasticDepth's p to 0 after building, for the builders
  // that fix stochastic_depth_prob themselves (Swin's).
  bool zero_stochastic_depth = false;
};

inline constexpr int kTorchvisionClasses = 10;

// What ExportTorchvisionModel wrote: the archive and PyTorch's first step on one batch.
struct TorchvisionExport {
  TorchvisionModel model;
  std::string archive;            // tools/export_model.py's .pt2
  std::string reference;          // torch.save of the batches, the loss, gradients and buffers
  double build_seconds = 0;       // the torchvision model built and initialised
  double export_seconds = 0;      // torch.export of both programs and the archive written
  double reference_seconds = 0;   // eager PyTorch's first step
  double python_cpu_seconds = 0;  // the CPU time of all three in Python
};

// Builds and initialises the model (seed 7), exports it with tools/export_model.py (a data
// dependency of the test) and computes eager PyTorch's first step; the worker keeps the model
// for ExpectTrainsAsInPyTorch's comparison. FailedPrecondition whose message starts "not
// capturable: " and gives export's error when the export tool fails (torch.export cannot
// capture the model in training mode, or the tool refuses what it captured); Internal for any
// other failure. PyTorch runs on as many threads as the caller's at::get_num_threads(), so
// that its kernels sum in the same order as Stoker's. Files go under $TEST_TMPDIR, named for
// the arch.
absl::StatusOr<TorchvisionExport> ExportTorchvisionModel(const TorchvisionModel& model);

// True for ExportTorchvisionModel's "not capturable" error.
bool IsNotCapturable(const absl::Status& status);

// Checks with gtest assertions that `graph` (loaded from exported.archive, in training mode or
// not) trains as PyTorch did: the first step's loss within 1e-6, every gradient within 1e-5 of
// its largest entry and every buffer within 1e-6; then three SGD steps (lr 0.01) and the
// evaluation logits of the exported weights in torchvision within 1e-5. Prints each
// comparison's worst error to stderr.
void ExpectTrainsAsInPyTorch(const TorchvisionExport& exported, GraphModel& graph);

// The {name: tensor} dict that the test's own Python wrote at `path` with torch.save (so
// pickles are trusted); a gtest failure and an empty map when it cannot be read.
std::map<std::string, at::Tensor> ReadPythonTensors(const std::string& path);

// torchvision.models.list_models(module=torchvision.models): the classification models.
absl::StatusOr<std::vector<std::string>> ListTorchvisionClassifiers();

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_TORCHVISION_CHECK_H_
