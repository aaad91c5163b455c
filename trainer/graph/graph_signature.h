// A program's signature (torch.export's input and output specs) checked against what
// Stoker trains: inputs that are the model's parameters and buffers plus one NCHW image
// batch (3 channels, a dynamic batch dimension, a static square image), and outputs that
// are one [batch, classes] logits tensor plus updates of buffers.
#ifndef STOKER_TRAINER_GRAPH_GRAPH_SIGNATURE_H_
#define STOKER_TRAINER_GRAPH_GRAPH_SIGNATURE_H_

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace stoker::trainer {

// What a program's inputs are bound to, by state-dict name. The tensors are the model's own
// (same TensorImpl), so moving the model (`to`, `set_data`) moves what the program reads.
struct GraphState {
  std::map<std::string, at::Tensor> parameters;
  std::map<std::string, at::Tensor> buffers;
  // The program's lifted tensor constants, by constant name ("lifted_tensor_0"): read, never
  // trained, updated or saved.
  std::map<std::string, at::Tensor> constants;
};

// A graph value bound to one of the model's tensors.
struct SignatureTensor {
  std::string value;  // the graph's name for it: "p_conv_weight", "add_3"
  at::Tensor tensor;  // the model's parameter, buffer or tensor constant
  bool is_buffer = false;
};

struct ProgramSignature {
  // Parameters, buffers and tensor constants, in the program's order.
  std::vector<SignatureTensor> weights;
  std::string input;  // the image batch's value
  int channels = 3;
  int image_size = 0;
  std::string output;  // the logits' value
  int num_classes = 0;
  // The buffers the program updates, each to the graph value `value`.
  std::vector<SignatureTensor> buffer_mutations;
};

// What the caller asks of the program; 0 takes the program's.
struct SignatureExpectations {
  std::string where;  // starts messages: "--model=m.pt2 (train program)"
  int num_classes = 0;
  int image_size = 0;
};

// Reads and checks the "signature" of `graph_module` (with the tensor metadata of its
// "graph"), binding parameters and buffers to `state`'s. InvalidArgument
// "<where>: <what> ..." for a program without graph or signature, an input that is neither
// a parameter, a buffer, a tensor constant nor the one image batch, an image batch Stoker cannot
// feed, an output that is neither the one logits tensor nor a buffer update, logits or images of
// other sizes than `expect` asks, and a parameter, buffer or constant `state` lacks.
absl::StatusOr<ProgramSignature> ReadProgramSignature(const nlohmann::json& graph_module,
                                                      const GraphState& state,
                                                      const SignatureExpectations& expect);

}  // namespace stoker::trainer

#endif  // STOKER_TRAINER_GRAPH_GRAPH_SIGNATURE_H_
