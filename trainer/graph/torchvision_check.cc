// The torchvision side of the checks runs as requests to one Python worker per process: the
// export and the eager reference, then the comparison of the exported weights' logits.
#include "trainer/graph/torchvision_check.h"

#include <ATen/Parallel.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/testing/python_runner.h"
#include "common/testing/python_worker.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "trainer/nn/state_dict.h"
#include "trainer/nn/state_dict_file.h"

namespace stoker::trainer {
namespace {

using ::stoker::testing::TempPath;

// Requests are JSON lines {"op": ..., "args": {...}}; each reply is one JSON line, with
// "error" (and "not_capturable" when the export tool failed) if the request failed. What the
// export tool prints goes to stderr, since stdout carries the replies.
constexpr char kTorchvisionWorker[] = R"py(
import gc, json, runpy, sys, time, traceback, types, torch, torchvision
replies, sys.stdout = sys.stdout, sys.stderr


# The model the last export built (seed 7), which the export tool exports, eager PyTorch
# trains one step and compare then loads Stoker's weights into.
built = {}


class Built(types.ModuleType):
    """The module "stoker_built": its <arch> returns the model export built, for the export
    tool's module:Class, so that each model is initialised once."""
    def __getattr__(self, arch):
        return lambda num_classes, **kwargs: built[arch]


sys.modules["stoker_built"] = Built("stoker_built")


def export(tool, arch, size, classes, batch, kwargs, zero_stochastic_depth, threads, archive,
           reference):
    """Builds the model, exports it with the export tool, then computes eager PyTorch's first
    step on one batch: the batch, the loss, every gradient and the buffers after the step."""
    start, cpu_start = time.monotonic(), time.process_time()
    torch.set_num_threads(threads)  # the test's: kernels may sum in another order on others
    built.clear()
    gc.collect()
    torch.manual_seed(7)
    model = getattr(torchvision.models, arch)(num_classes=classes, **json.loads(kwargs))
    if zero_stochastic_depth:
        for module in model.modules():
            if isinstance(module, torchvision.ops.StochasticDepth):
                module.p = 0.0
    built[arch] = model
    build_seconds = time.monotonic() - start
    start = time.monotonic()
    sys.argv = [tool, "stoker_built:" + arch, "--num_classes", str(classes), "--image_size",
                str(size), "--kwargs", kwargs, "--out", archive]
    try:
        runpy.run_path(tool, run_name="__main__")
    except BaseException as e:  # torch.export's errors, or the tool's SystemExit
        traceback.print_exc()
        built.clear()
        return {"error": f"{type(e).__name__}: {e}", "not_capturable": True}
    export_seconds = time.monotonic() - start
    start = time.monotonic()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(batch, 3, size, size, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    x_eval = torch.randn(batch, 3, size, size, generator=g)
    model.train()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    ref = {"x": x, "y": y, "x_eval": x_eval, "loss": loss.detach()}
    for k, p in model.named_parameters():
        ref["grad." + k] = p.grad
    for k, b in model.named_buffers():
        ref["buffer." + k] = b
    torch.save(ref, reference)
    model.zero_grad(set_to_none=True)
    return {"build_seconds": build_seconds, "export_seconds": export_seconds,
            "reference_seconds": time.monotonic() - start,
            "cpu_seconds": time.process_time() - cpu_start}


def compare(arch, weights, reference, logits):
    """Loads the weights into the model export built (strict); the largest |logit
    difference| and |logit| in evaluation mode."""
    model = built.pop(arch)
    model.load_state_dict(torch.load(weights, weights_only=True), strict=True)
    model.eval()
    x = torch.load(reference, weights_only=True)["x_eval"]
    ours = torch.load(logits, weights_only=False)["logits"]  # written by torch::pickle_save
    with torch.no_grad():
        theirs = model(x)
    theirs, ours = theirs.double(), ours.double()
    # Deep models' evaluation logits can overflow (running statistics of three steps):
    # non-finite entries must be the same ones, and the finite ones compare.
    finite, both = theirs.isfinite(), theirs.isfinite() & ours.isfinite()
    same_nonfinite = bool((finite == ours.isfinite()).all()) and bool(
        (theirs[~finite].nan_to_num() == ours[~finite].nan_to_num()).all())
    diff = (theirs[both] - ours[both]).abs().max() if both.any() else torch.tensor(0.0)
    scale = theirs[both].abs().max() if both.any() else torch.tensor(0.0)
    return {"diff": float(diff), "scale": float(scale), "nonfinite": int((~finite).sum()),
            "same_nonfinite": same_nonfinite}


def list_models():
    return {"models": torchvision.models.list_models(module=torchvision.models)}


for line in sys.stdin:
    request = json.loads(line)
    try:
        reply = {"export": export, "compare": compare, "list": list_models}[request["op"]](**request["args"])
    except BaseException:
        reply = {"error": traceback.format_exc()}
    replies.write(json.dumps(reply) + "\n")
    replies.flush()
)py";

constexpr int kCallTimeoutSeconds = 900;

// The reply to {"op": op, "args": args}; Internal with the worker's error if it failed.
absl::StatusOr<nlohmann::json> Call(const std::string& op, const nlohmann::json& args) {
  // Destroyed at exit, which waits for the process: its CPU time counts as the test's.
  static ::stoker::testing::PythonWorker worker(kTorchvisionWorker);
  const nlohmann::json request = {{"op", op}, {"args", args}};
  absl::StatusOr<std::string> line = worker.Call(request.dump(), kCallTimeoutSeconds);
  if (!line.ok()) return line.status();
  nlohmann::json reply = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) return absl::InternalError(absl::StrCat("worker replied: ", *line));
  if (reply.contains("error")) {
    const std::string error = reply["error"].get<std::string>();
    if (reply.value("not_capturable", false)) {
      return absl::FailedPreconditionError(absl::StrCat("not capturable: ", error));
    }
    return absl::InternalError(absl::StrCat(op, " failed in Python: ", error));
  }
  return reply;
}

std::string ExportTool() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/stoker/tools/export_model.py");
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// max |a - b| / max(|b|, tiny): the error relative to the reference's largest entry.
double RelativeToMax(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble), y = b.to(at::kDouble);
  const double scale = y.abs().max().item<double>();
  const double diff = (x - y).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

}  // namespace

std::map<std::string, at::Tensor> ReadPythonTensors(const std::string& path) {
  StateDictFileOptions trusted;  // a file the test's own Python wrote
  trusted.allow_pickle = true;
  absl::StatusOr<std::map<std::string, at::Tensor>> tensors = ReadStateDictFile(path, trusted);
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  return tensors.ok() ? *std::move(tensors) : std::map<std::string, at::Tensor>();
}

absl::StatusOr<TorchvisionExport> ExportTorchvisionModel(const TorchvisionModel& model) {
  TorchvisionExport exported{model, TempPath(absl::StrCat(model.arch, ".pt2")),
                             TempPath(absl::StrCat(model.arch, "_reference.pt"))};
  absl::StatusOr<nlohmann::json> reply =
      Call("export", {{"tool", ExportTool()},
                      {"arch", model.arch},
                      {"size", model.image_size},
                      {"classes", kTorchvisionClasses},
                      {"batch", model.batch},
                      {"kwargs", model.kwargs},
                      {"zero_stochastic_depth", model.zero_stochastic_depth},
                      {"threads", at::get_num_threads()},
                      {"archive", exported.archive},
                      {"reference", exported.reference}});
  if (!reply.ok()) return reply.status();
  exported.export_seconds = (*reply)["export_seconds"].get<double>();
  exported.reference_seconds = (*reply)["reference_seconds"].get<double>();
  exported.build_seconds = (*reply)["build_seconds"].get<double>();
  exported.python_cpu_seconds = (*reply)["cpu_seconds"].get<double>();
  return exported;
}

bool IsNotCapturable(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) && absl::StartsWith(status.message(), "not capturable");
}

void ExpectTrainsAsInPyTorch(const TorchvisionExport& exported, GraphModel& graph) {
  const std::string& arch = exported.model.arch;
  std::map<std::string, at::Tensor> ref = ReadPythonTensors(exported.reference);

  // First step: loss, gradients, statistics.
  graph.train();
  at::Tensor loss = at::cross_entropy_loss(graph.forward(ref["x"]), ref["y"]);
  loss.backward();
  const double loss_error = RelativeToMax(loss.detach(), ref["loss"]);
  EXPECT_LE(loss_error, 1e-6) << "loss " << loss.item<double>() << " vs "
                              << ref["loss"].item<double>();
  double worst_grad = 0;
  int parameters = 0;
  for (const auto& item : graph.named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(ref.count("grad." + item.key()));
    ASSERT_TRUE(item.value().grad().defined());
    const double e = RelativeToMax(item.value().grad(), ref["grad." + item.key()]);
    EXPECT_LE(e, 1e-5);
    worst_grad = std::max(worst_grad, e);
    ++parameters;
  }
  double worst_buffer = 0;
  for (const auto& item : graph.named_buffers()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(ref.count("buffer." + item.key()));
    const double e = RelativeToMax(item.value(), ref["buffer." + item.key()]);
    EXPECT_LE(e, 1e-6);
    worst_buffer = std::max(worst_buffer, e);
  }
  std::cerr << arch << ": loss " << loss.item<double>() << " (relative error " << loss_error
            << "), " << parameters << " gradients (worst " << worst_grad
            << " of their max), buffers worst " << worst_buffer << "\n";

  // Three steps of plain SGD (the first with the gradients above), then evaluation logits
  // and the exported weights.
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      for (at::Tensor& p : graph.parameters()) p.mutable_grad() = at::Tensor();
      at::cross_entropy_loss(graph.forward(ref["x"]), ref["y"]).backward();
    }
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : graph.parameters()) p.sub_(p.grad(), 0.01);
  }
  graph.eval();
  at::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = graph.forward(ref["x_eval"]);
  }
  ref.clear();
  absl::StatusOr<std::string> weights = PickleStateDict(graph);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const std::string weights_path = TempPath(absl::StrCat(arch, "_trained.pt"));
  WriteFile(weights_path, *weights);
  weights->clear();
  const std::string logits_path = TempPath(absl::StrCat(arch, "_logits.pt"));
  absl::Cleanup remove_files = [&] {
    unlink(weights_path.c_str());
    unlink(logits_path.c_str());
  };
  {
    c10::Dict<std::string, at::Tensor> dict;
    dict.insert("logits", logits);
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
    WriteFile(logits_path, std::string(bytes.begin(), bytes.end()));
  }
  absl::StatusOr<nlohmann::json> compared = Call("compare", {{"arch", arch},
                                                             {"weights", weights_path},
                                                             {"reference", exported.reference},
                                                             {"logits", logits_path}});
  ASSERT_TRUE(compared.ok()) << compared.status();
  const double diff = (*compared)["diff"].get<double>();
  const double scale = (*compared)["scale"].get<double>();
  const int nonfinite = (*compared)["nonfinite"].get<int>();
  EXPECT_TRUE((*compared)["same_nonfinite"].get<bool>())
      << "torchvision's and Stoker's non-finite logits differ";
  EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << "largest |logit| " << scale;
  std::cerr << arch << ": after 3 steps, torchvision's logits from the exported weights differ by "
            << diff << " (largest |logit| " << scale << ")";
  if (nonfinite > 0) std::cerr << "; " << nonfinite << " of torchvision's are not finite";
  std::cerr << "\n";
}

absl::StatusOr<std::vector<std::string>> ListTorchvisionClassifiers() {
  absl::StatusOr<nlohmann::json> reply = Call("list", nlohmann::json::object());
  if (!reply.ok()) return reply.status();
  return (*reply)["models"].get<std::vector<std::string>>();
}

}  // namespace stoker::trainer
