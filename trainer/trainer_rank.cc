#include "trainer/trainer_rank.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "common/shm_segment.h"
#include "launcher/rank/job_files.h"
#include "launcher/rank/node_data_service.h"
#include "launcher/rank/rank_setup.h"
#include "trainer/comm/mpi_communicator.h"
#include "trainer/device.h"
#include "trainer/gpu_binding.h"
#include "trainer/run_context.h"
#include "trainer/stop_signal.h"
#include "trainer/traced_steps.h"
#include "trainer/train_loop.h"

#ifdef STOKER_WITH_CUDA
#include "trainer/comm/nccl_communicator.h"
#endif

namespace stoker::trainer {
namespace {

// No --data_socket: each node's local rank 0 runs the node's data service (Note [Data
// service per node]); null when the rank reads a given socket or trains on synthetic
// batches. Ends the job on failure.
std::unique_ptr<launcher::NodeDataService> StartNodeDataService(launcher::MpiSession& session,
                                                                const TrainerOptions& options,
                                                                const NodeDataServiceFlags& flags) {
  if (!options.input.data_socket.empty() || options.input.synthetic_steps != 0) return nullptr;
  launcher::NodeDataServiceOptions service_options;
  service_options.program = flags.program;
  service_options.job_id = flags.job_id;
  service_options.seed = options.seed;
  service_options.args = flags.args;
  if (!options.report.trace_dir.empty()) {
    // The service traces the batches of the ranks' traced steps (trainer/traced_steps.h).
    absl::StatusOr<TraceSteps> window = TraceWindowOf(options);
    if (!window.ok()) session.Abort(ReportFailure(window.status()));
    service_options.args.push_back(absl::StrCat("--trace=", options.report.trace_dir));
    service_options.args.push_back(
        absl::StrCat("--trace_steps=", DataServiceTraceSteps(*window, options.step.accumulate)));
  }
  service_options.ready_timeout = options.input.data_timeout;
  service_options.startup_timeout = options.comm.collective_timeout;
  auto started = launcher::NodeDataService::Start(session.info(), session.world(), session.node(),
                                                  service_options);
  if (!started.ok()) session.Abort(ReportFailure(started.status()));
  return std::move(*started);
}

}  // namespace

absl::StatusOr<int> RunTrainerRank(int* argc, char*** argv, TrainerOptions options,
                                   const NodeDataServiceFlags& node_data_service_flags) {
  launcher::RankSetupOptions rank_setup;
  rank_setup.ranks_per_node = node_data_service_flags.ranks_per_node;
  // MPI_Finalize waits for every rank: bounded like a collective (Note [Bounded
  // MPI_Finalize] in launcher/rank/rank_setup.h).
  rank_setup.finalize_timeout = options.comm.collective_timeout;
  // The start-up collectives have the same bound (Note [Start-up and teardown deadlines]
  // in launcher/rank/phase_deadline.h).
  rank_setup.startup_timeout = options.comm.collective_timeout;
  auto session = launcher::MpiSession::Create(argc, argv, rank_setup);
  if (!session.ok()) {
    return absl::Status(session.status().code(),
                        absl::StrCat("MPI start-up failed: ", session.status().message()));
  }
  const launcher::RankInfo& rank = (*session)->info();
  SetLogIdentity(absl::StrCat("trainer rank ", rank.rank));
  // SIGINT/SIGTERM stop every rank at the same step boundary, with a checkpoint.
  if (absl::Status installed = InstallStopSignalHandlers(); !installed.ok()) {
    (*session)->Abort(ReportFailure(installed));
  }
  // A ring truncated under this rank ends it naming the segment (Note [Truncated shared
  // memory] in common/shm_segment.h), not with a bare SIGBUS.
  if (absl::Status guarded = InstallTruncatedSharedMemoryGuard(
          kExitPeerLost, absl::StrCat("trainer rank ", rank.rank));
      !guarded.ok()) {
    (*session)->Abort(ReportFailure(guarded));
  }

  // Started before any CUDA call, and stopped after training.
  std::unique_ptr<launcher::NodeDataService> node_data_service =
      StartNodeDataService(**session, options, node_data_service_flags);
  if (node_data_service != nullptr) options.input.data_socket = node_data_service->socket_path();

  absl::Status status;
  int exit_code = kExitOk;
  {
    // Gradients go through `communicator` (NCCL on GPUs); control decisions (seed, resume,
    // stop votes, validation counts) through `host` (MPI, host memory).
    std::unique_ptr<Communicator> communicator;
    std::unique_ptr<Communicator> host;
    auto mpi = MpiCommunicator::Create((*session)->world());
    if (mpi.ok()) host = std::move(*mpi);
    status = mpi.status();
    absl::StatusOr<bool> use_cuda = BindRankToGpu(options.device.device, rank);
    RunContext context;
    context.rank = rank;
    context.world = (*session)->world();
    context.job_id = node_data_service != nullptr
                         ? node_data_service->job_id()
                         : launcher::JobIdOfSocketPath(options.input.data_socket);
    if (status.ok()) status = use_cuda.status();
    if (status.ok() && *use_cuda) {
#ifdef STOKER_WITH_CUDA
      context.use_cuda = true;
      context.cuda_device = rank.local_rank;
      ConfigureCudaAllocator(options.device);
      auto nccl = NcclCommunicator::Create((*session)->world(), rank.local_rank,
                                           options.comm.collective_timeout);
      if (nccl.ok()) communicator = std::move(*nccl);
      status = nccl.status();
#endif
    }
    Communicator* gradients = communicator != nullptr ? communicator.get() : host.get();
    if (status.ok()) {
      absl::StatusOr<TrainingOutcome> outcome = RunTraining(options, context, *gradients, *host);
      status = outcome.status();
      if (outcome.ok()) exit_code = ExitCodeFor(*outcome);
    }
    if (status.ok() && node_data_service != nullptr) status = node_data_service->Stop();
    if (!status.ok()) {
      const int failure_code = ReportFailure(status);
      // Local rank 0: stop the node's data service and remove what it left (also when it
      // died), before the abort ends this process.
      node_data_service.reset();
      // The other ranks may be waiting in a collective: end the whole job now.
      (*session)->Abort(failure_code);
    }
  }
  if (rank.rank == 0 && exit_code == kExitOk) LogInfo("training finished");
  return exit_code;
}

}  // namespace stoker::trainer
