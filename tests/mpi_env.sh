# Environment for running Open MPI in tests and scripts: allowed as root (CI runs as
# root), oversubscription allowed (CI has 2 cores), shared memory without ptrace-based
# single copy (refused in containers), loopback-only TCP, and NCCL without NVLink
# multicast (see the GPU hosts' notes).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_btl_tcp_if_include=lo
export OMPI_MCA_oob_tcp_if_include=lo
export NCCL_NVLS_ENABLE=0
