// The trainer program: one MPI rank, on its own GPU when the node has one (else the CPU).
// Flags describe the run (trainer/flags.h; --help lists them); exit codes are the table of
// common/exit_codes.h: 0 finished, 2 bad flag, 65 bad data, 69 peer lost, 74 checkpoint
// I/O, 75 --stop_after_steps, 124 timeout, 128+N stopped by signal N with a checkpoint, 1
// any other failure. A failure's first error line names its cause and the rank.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_work_queues.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/shm_segment.h"
#include "common/status_macros.h"
#include "launcher/rank/data_service_args.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/node_data_service.h"
#include "launcher/rank/rank_setup.h"
#include "trainer/comm/mpi_communicator.h"
#include "trainer/device.h"
#include "trainer/flags.h"
#include "trainer/stop_signal.h"
#include "trainer/train_loop.h"

#ifdef STOKER_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_status.h"
#include "trainer/comm/nccl_communicator.h"
#endif

// The node data service flags (launcher/rank/node_data_service.h); the run's flags are in
// trainer/flags.cc.
ABSL_FLAG(std::string, job_id, "", "Without --data_socket: the job id naming the node data services' sockets and segments; rank 0's value counts; empty: rank 0 makes one.");
ABSL_FLAG(std::string, data_service, "", "Without --data_socket: the data_service program; default: next to the trainer, or ../data_service/data_service.");
ABSL_FLAG(std::string, data_service_args, "", "Without --data_socket: more data service flags, split on spaces, each --name=value (e.g. \"--dataset=imagefolder --train_dir=/data/train\"); not --socket, --job_id or --node_id.");
ABSL_FLAG(int, ranks_per_node, 0, "0: a node is a host (ranks sharing memory). N: ranks [kN, (k+1)N) form node k, each with its own data service (testing several nodes on one host).");

namespace {

// Binds this rank to GPU `local_rank` and creates its CUDA context there before any other
// CUDA call, so that no rank ever opens a context on another rank's GPU. Returns whether
// the rank trains on a GPU.
absl::StatusOr<bool> BindDevice(stoker::trainer::DeviceChoice device, const stoker::launcher::RankInfo& rank) {
  using stoker::trainer::DeviceChoice;
  if (device == DeviceChoice::kCpu) return false;
#ifdef STOKER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (count == 0) {
    if (device == DeviceChoice::kCuda) return absl::FailedPreconditionError("--device=cuda but no GPU is visible");
    return false;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  ASSIGN_OR_RETURN(const int gpu, stoker::launcher::GpuForLocalRank(rank, count, visible != nullptr ? visible : ""));
  RETURN_IF_ERROR(stoker::CudaStatus(cudaSetDevice(gpu), "cudaSetDevice"));
  RETURN_IF_ERROR(stoker::CudaStatus(cudaFree(nullptr), "creating the CUDA context"));
  return true;
#else
  if (device == DeviceChoice::kCuda) return absl::FailedPreconditionError("--device=cuda but this build has no CUDA");
  (void)rank;
  return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // Before any CUDA call: CUDA reads it when it makes the context.
  stoker::UseAllCudaWorkQueues();  // Note [Hardware work queues]
  stoker::SetLogIdentity("trainer");
  absl::StatusOr<stoker::trainer::TrainerCommandLine> command_line =
      stoker::trainer::ParseTrainerCommandLine(absl::MakeConstSpan(argv + 1, argc - 1));
  if (!command_line.ok()) {
    std::fprintf(stderr, "trainer: %s\nRun `trainer --help` for the flags.\n",
                 std::string(command_line.status().message()).c_str());
    return stoker::trainer::kExitUsage;
  }
  if (command_line->help) {
    std::fputs(stoker::trainer::TrainerFlagsHelp().c_str(), stdout);
    return stoker::trainer::kExitOk;
  }
  stoker::trainer::TrainerOptions* options = &command_line->options;
  absl::StatusOr<std::vector<std::string>> data_service_args =
      stoker::launcher::ParseDataServiceArgs(absl::GetFlag(FLAGS_data_service_args));
  if (!data_service_args.ok()) {
    std::fprintf(stderr, "trainer: %s\nRun `trainer --help` for the flags.\n",
                 std::string(data_service_args.status().message()).c_str());
    return stoker::trainer::kExitUsage;
  }

  stoker::launcher::RankSetupOptions rank_setup;
  rank_setup.ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  // MPI_Finalize waits for every rank: bounded like a collective (Note [Bounded
  // MPI_Finalize] in launcher/rank/rank_setup.h).
  rank_setup.finalize_timeout = options->comm.collective_timeout;
  // The start-up collectives have the same bound (Note [Start-up and teardown deadlines]
  // in launcher/rank/phase_deadline.h).
  rank_setup.startup_timeout = options->comm.collective_timeout;
  auto session = stoker::launcher::MpiSession::Create(&argc, &argv, rank_setup);
  if (!session.ok()) {
    return stoker::ReportFailure(
        absl::Status(session.status().code(),
                     absl::StrCat("MPI start-up failed: ", session.status().message())));
  }
  const stoker::launcher::RankInfo& rank = (*session)->info();
  stoker::SetLogIdentity(absl::StrCat("trainer rank ", rank.rank));
  // SIGINT/SIGTERM stop every rank at the same step boundary, with a checkpoint.
  if (absl::Status installed = stoker::trainer::InstallStopSignalHandlers(); !installed.ok()) {
    (*session)->Abort(stoker::ReportFailure(installed));
  }
  // A ring truncated under this rank ends it naming the segment (Note [Truncated shared
  // memory] in common/shm_segment.h), not with a bare SIGBUS.
  if (absl::Status guarded = stoker::InstallTruncatedSharedMemoryGuard(
          stoker::kExitFailure, absl::StrCat("trainer rank ", rank.rank));
      !guarded.ok()) {
    (*session)->Abort(stoker::ReportFailure(guarded));
  }

  // No --data_socket: each node's local rank 0 runs the node's data service (Note [Data
  // service per node]). Started before any CUDA call, and stopped after training.
  std::unique_ptr<stoker::launcher::NodeDataService> node_data_service;
  if (options->input.data_socket.empty() && options->input.synthetic_steps == 0) {
    stoker::launcher::NodeDataServiceOptions service_options;
    service_options.program = absl::GetFlag(FLAGS_data_service);
    service_options.job_id = absl::GetFlag(FLAGS_job_id);
    service_options.seed = options->seed;
    service_options.args = *data_service_args;
    service_options.ready_timeout = options->input.data_timeout;
    service_options.startup_timeout = options->comm.collective_timeout;
    auto started = stoker::launcher::NodeDataService::Start(rank, (*session)->world(), (*session)->node(), service_options);
    if (!started.ok()) (*session)->Abort(stoker::ReportFailure(started.status()));
    node_data_service = std::move(*started);
    options->input.data_socket = node_data_service->socket_path();
  }

  absl::Status status;
  int exit_code = stoker::trainer::kExitOk;
  {
    // Gradients go through `communicator` (NCCL on GPUs); control decisions (seed, resume,
    // stop votes, validation counts) through `host` (MPI, host memory).
    std::unique_ptr<stoker::trainer::Communicator> communicator;
    std::unique_ptr<stoker::trainer::Communicator> host;
    auto mpi = stoker::trainer::MpiCommunicator::Create((*session)->world());
    if (mpi.ok()) host = std::move(*mpi);
    status = mpi.status();
    absl::StatusOr<bool> use_cuda = BindDevice(options->device.device, rank);
    stoker::trainer::RunContext context;
    context.rank = rank;
    context.job_id = node_data_service != nullptr
                         ? node_data_service->job_id()
                         : stoker::launcher::JobIdOfSocketPath(options->input.data_socket);
    if (status.ok()) status = use_cuda.status();
    if (status.ok() && *use_cuda) {
#ifdef STOKER_WITH_CUDA
      context.use_cuda = true;
      context.cuda_device = rank.local_rank;
      stoker::trainer::ConfigureCudaAllocator(options->device);
      auto nccl = stoker::trainer::NcclCommunicator::Create((*session)->world(), rank.local_rank,
                                                            options->comm.collective_timeout);
      if (nccl.ok()) communicator = std::move(*nccl);
      status = nccl.status();
#endif
    }
    stoker::trainer::Communicator* gradients = communicator != nullptr ? communicator.get() : host.get();
    if (status.ok()) {
      absl::StatusOr<stoker::trainer::TrainingOutcome> outcome =
          stoker::trainer::RunTraining(*options, context, *gradients, *host);
      status = outcome.status();
      if (outcome.ok()) exit_code = stoker::trainer::ExitCodeFor(*outcome);
    }
    if (status.ok() && node_data_service != nullptr) status = node_data_service->Stop();
    if (!status.ok()) {
      const int failure_code = stoker::ReportFailure(status);
      // Local rank 0: stop the node's data service and remove what it left (also when it
      // died), before the abort ends this process.
      node_data_service.reset();
      // The other ranks may be waiting in a collective: end the whole job now.
      (*session)->Abort(failure_code);
    }
  }
  if (rank.rank == 0 && exit_code == stoker::trainer::kExitOk) stoker::LogInfo("training finished");
  return exit_code;
}
