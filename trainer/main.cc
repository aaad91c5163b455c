// The trainer program: one MPI rank. Flags describe the run; see --help.
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "trainer/mpi_communicator.h"
#include "trainer/rank_setup.h"
#include "trainer/train_loop.h"

ABSL_FLAG(std::string, data_socket, "", "Unix socket of this node's data service (required).");
ABSL_FLAG(std::string, model, "small_cnn", "Model: small_cnn.");
ABSL_FLAG(int, num_classes, 10, "Number of classes of the dataset.");
ABSL_FLAG(int, image_size, 32, "Square image size in pixels fed to the model.");
ABSL_FLAG(int, batch_size, 32, "Batch size per rank.");
ABSL_FLAG(int, epochs, 1, "Number of epochs.");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum.");
ABSL_FLAG(double, weight_decay, 0.0, "SGD weight decay.");
ABSL_FLAG(uint64_t, seed, 0, "Base seed for weights, sampling order and augmentation; rank 0's value wins.");
ABSL_FLAG(int, bucket_mb, 25, "Gradient bucket size in MiB.");
ABSL_FLAG(int, ring_slots, 4, "Batches in flight in this rank's shared-memory ring.");
ABSL_FLAG(int, log_every, 10, "Steps between progress lines (rank 0).");
ABSL_FLAG(int, data_timeout_s, 120, "Seconds to wait for a batch before failing.");
ABSL_FLAG(std::string, final_params_out, "", "If set, each rank writes its final parameters to PATH.rank<r>.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Stoker trainer: one MPI rank. Usually started by `launcher`.");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  stoker::SetLogIdentity("trainer");

  stoker::trainer::TrainerOptions options;
  options.data_socket = absl::GetFlag(FLAGS_data_socket);
  options.model = absl::GetFlag(FLAGS_model);
  options.num_classes = absl::GetFlag(FLAGS_num_classes);
  options.image_size = absl::GetFlag(FLAGS_image_size);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.epochs = absl::GetFlag(FLAGS_epochs);
  options.learning_rate = absl::GetFlag(FLAGS_lr);
  options.momentum = absl::GetFlag(FLAGS_momentum);
  options.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.bucket_bytes = static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_bucket_mb))) << 20;
  options.ring_slots = absl::GetFlag(FLAGS_ring_slots);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.data_timeout = absl::Seconds(absl::GetFlag(FLAGS_data_timeout_s));
  options.final_params_out = absl::GetFlag(FLAGS_final_params_out);
  if (absl::Status status = stoker::trainer::ValidateOptions(options); !status.ok()) {
    stoker::LogError("%s", status.message());
    return 2;
  }

  auto session = stoker::trainer::MpiSession::Create(&argc, &argv);
  if (!session.ok()) {
    stoker::LogError("MPI start-up failed: %s", session.status().message());
    return 1;
  }
  const stoker::trainer::RankInfo& rank = (*session)->info();
  stoker::SetLogIdentity(absl::StrCat("trainer rank ", rank.rank));
  auto communicator = stoker::trainer::MpiCommunicator::Create((*session)->world());
  absl::Status status = communicator.ok()
                            ? stoker::trainer::RunTraining(options, rank, **communicator)
                            : communicator.status();
  if (!status.ok()) {
    stoker::LogError("%s", status.ToString());
    // The other ranks may be waiting in a collective: end the whole job now.
    (*session)->Abort(1);
  }
  if (rank.rank == 0) stoker::LogInfo("training finished");
  communicator->reset();
  return 0;
}
