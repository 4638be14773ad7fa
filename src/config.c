/* The one table of environment variables that DION reads. docs/configuration.md is generated from it
 * (dion-info --config-markdown) and a test fails when the two drift apart. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

const dion__cfg_entry_t dion__cfg_table[] = {
    /* logging and diagnostics */
    {"DION_LOG", DION_CFG_ENUM, "warn", "error|warn|info|debug|trace",
     "How much the library logs on stderr; each line is prefixed with host and rank.", NULL},
    {"DION_CHECK", DION_CFG_BOOL, "0", NULL,
     "1: every device call checks peer, signal index, context and offsets against the target's window and "
     "writes an error record instead of touching memory.",
     NULL},
    {"DION_STATS", DION_CFG_BOOL, "0", NULL,
     "1: device calls count operations per context (dion_dev_stats). Off by default: counting costs an "
     "atomic "
     "per operation.",
     NULL},
    {"DION_TRACE", DION_CFG_STRING, NULL, NULL,
     "Path of a Chrome-trace JSON file: device operations are recorded per context and each rank writes "
     "path.rank<N>.json at dion_dev_destroy (%r in the path is replaced by the rank instead). "
     "dion-trace-merge joins the files. See docs/tracing.md.",
     NULL},
    {"DION_TRACE_EVENTS", DION_CFG_INT, "16384", NULL,
     "With DION_TRACE: events kept per context (64 bytes each, device memory); later events are counted as "
     "dropped. Range 1 to 16777216.",
     NULL},
    {"DION_WATCHDOG_INTERVAL", DION_CFG_DURATION, "100ms", NULL,
     "How often the watchdog thread reads the device error ring and reports new records through the logger; "
     "0 disables the thread.",
     NULL},
    /* device behaviour */
    {"DION_WAIT_TIMEOUT", DION_CFG_DURATION, "10s", NULL,
     "Default timeout of every device wait, quiet and barrier when dion_dev_attr_t.wait_timeout_ns is 0; "
     "0 waits forever.",
     NULL},
    {"DION_TRANSPORT", DION_CFG_ENUM, "auto", "auto|p2p|gdaki|proxy|proxy/verbs|proxy/ofi",
     "Backend for remote peers. auto: p2p where the peer's memory can be mapped, else gdaki where a NIC for "
     "it is usable (see DION_GDAKI_NIC), else proxy (proxy threads drive a network engine; reaches other "
     "hosts). A name forces that backend for every peer. proxy takes the verbs engine (rdma-core) when every "
     "rank can open it, else ofi (libfabric); proxy/verbs and proxy/ofi force the engine.",
     NULL},
    {"DION_CPU_MODE", DION_CFG_BOOL, "0", NULL,
     "1: dion_dev_create builds a CPU-mode handle (device calls run on CPU threads over host windows) even "
     "when a GPU is present. Without a usable GPU CPU mode is chosen anyway.",
     NULL},
    {"DION_DEVICE", DION_CFG_INT, "-1", NULL,
     "GPU ordinal that comm initialization selects with cudaSetDevice; dionrun sets it round-robin. -1 "
     "(unset): "
     "the current device when the application chose one, else local rank modulo the visible GPUs (see "
     "DION_LOCAL_RANK).",
     NULL},
    {"DION_TMPDIR", DION_CFG_STRING, "/tmp", NULL,
     "Folder for the rendezvous file that env initialization uses when no root address is given.", NULL},
    /* proxy backend */
    {"DION_PROXY_THREADS", DION_CFG_INT, "1", NULL,
     "Proxy threads per rank (1-256) that drain the proxy backend's command rings; contexts are shared out "
     "round-robin, so more threads than contexts adds nothing.",
     NULL},
    {"DION_PROXY_SPIN", DION_CFG_DURATION, "50us", NULL,
     "How long an idle proxy thread keeps polling its rings before it starts to sleep. Longer: lower pickup "
     "latency after short pauses, one busy core meanwhile.",
     NULL},
    {"DION_PROXY_SLEEP_MAX", DION_CFG_DURATION, "1ms", NULL,
     "Longest nap of an idle proxy thread (naps double from 1us up to this). The first command after an idle "
     "spell may wait this long; an idle thread wakes about once per this interval.",
     NULL},
    {"DION_PROXY_STAGING", DION_CFG_ENUM, "auto", "auto|always",
     "Which windows the proxy stages through pinned host shadows (docs/backends/proxy.md). auto: GPU windows "
     "when the provider cannot register GPU memory; always: every window, host windows too (for tests: CPU "
     "mode then runs the staged path). Every rank must use the same value.",
     NULL},
    /* gdaki backend */
    {"DION_GDAKI_NIC", DION_CFG_ENUM, "auto", "auto|mlx5|softnic",
     "NIC that gdaki posts to. auto: a ConnectX (mlx5) NIC when one is usable, else gdaki is not used. "
     "softnic: the NIC model, a CPU thread per rank that reads the work requests device code writes, checks "
     "them and executes them through the ofi engine; for tests without a NIC, never chosen by auto, and "
     "logged when used (docs/gdaki.md).",
     NULL},
    {"DION_GDAKI_QP_DEPTH", DION_CFG_INT, "1024", NULL,
     "gdaki send-queue size of each (context, peer) QP, in 64-byte WQEBBs: a power of two, 64 to 32768 (GPU "
     "handles: at least 256, so that a whole warp's work requests fit in three quarters of it). Small "
     "values make posting threads wait for slots sooner (for tests).",
     NULL},
    {"DION_SOFTNIC_INJECT", DION_CFG_STRING, NULL, NULL,
     "With DION_GDAKI_NIC=softnic, for tests: kind@N makes the N-th work request this rank's model executes "
     "(counted from 1 over all its QPs) fail with an error completion instead. kind: remote_access (syndrome "
     "0x13), local_prot (0x04), retry (0x15, transport retries exceeded), remote_op (0x14).",
     NULL},
    /* proxy/verbs engine (rdma-core) */
    {"DION_IB_HCA", DION_CFG_STRING, NULL, NULL,
     "RDMA device for proxy/verbs (as ibv_devices lists it, e.g. mlx5_0), optionally with :port (mlx5_0:1). "
     "Unset: the first device with an ACTIVE port.",
     NULL},
    {"DION_IB_LIBRARY", DION_CFG_STRING, NULL, NULL,
     "libibverbs that proxy/verbs loads: a file name or path. Unset: libibverbs.so.1 from the system's "
     "library "
     "path. For an rdma-core outside that path (or the tests' fake libibverbs).",
     NULL},
    {"DION_IB_PORT", DION_CFG_INT, "0", NULL,
     "Port of the RDMA device for proxy/verbs; 0: the first ACTIVE port. Range 0 to 255.", NULL},
    {"DION_IB_GID_INDEX", DION_CFG_INT, "-1", NULL,
     "GID table index for proxy/verbs. -1: RoCE picks a RoCE v2 IPv4-mapped GID, else a RoCE v2 IPv6 one, "
     "else RoCE v1; InfiniBand addresses by LID. A value forces that GID (with a GRH on InfiniBand).",
     NULL},
    {"DION_IB_TIMEOUT", DION_CFG_INT, "18", NULL,
     "proxy/verbs QP transport timeout exponent: each retry waits 4.096 us * 2^value (18: about 1.07 s, so "
     "with 7 retries a dead peer fails operations in about 8 s, before the default 10 s wait timeout). "
     "Range 1 to 31.",
     NULL},
    {"DION_IB_RETRY_CNT", DION_CFG_INT, "7", NULL,
     "proxy/verbs QP transport retries before an operation fails with 'retry counter exceeded'. Range 0 to "
     "7.",
     NULL},
    {"DION_IB_SL", DION_CFG_INT, "0", NULL, "proxy/verbs InfiniBand service level. Range 0 to 15.", NULL},
    {"DION_IB_TC", DION_CFG_INT, "0", NULL,
     "proxy/verbs traffic class in the GRH (RoCE: the DSCP/ECN byte). Range 0 to 255.", NULL},
    {"DION_IB_QP_DEPTH", DION_CFG_INT, "256", NULL,
     "proxy/verbs send-queue depth of each (context, peer) QP: operations in flight per peer and context. "
     "Range 16 to 32768.",
     NULL},
    {"DION_IB_CQ_DEPTH", DION_CFG_INT, "4096", NULL,
     "proxy/verbs completion-queue depth of each context: operations in flight per context over all peers. "
     "Range 64 to 4194304.",
     NULL},
    {"DION_IB_CONNECT", DION_CFG_ENUM, "auto", "auto|eager|ondemand",
     "When proxy/verbs connects its RC QPs (one per peer). eager: to every peer at comm creation, through "
     "one "
     "allgather of 40 bytes per peer and rank. ondemand: to a peer when the proxy first posts to it; the QP "
     "addresses travel point to point over TCP (each rank listens on the bootstrap's interface) and that "
     "first "
     "command waits for the handshake, failing with a sentence naming the peer after DION_WAIT_TIMEOUT. "
     "auto: "
     "eager up to DION_IB_EAGER_MAX_RANKS ranks, on demand above (docs/multihost.md, scale). Every rank must "
     "use the same value.",
     NULL},
    {"DION_IB_EAGER_MAX_RANKS", DION_CFG_INT, "128", NULL,
     "With DION_IB_CONNECT=auto: the largest comm whose proxy/verbs QPs are connected eagerly. Range 1 to "
     "16777216.",
     NULL},
    {"DION_GDAKI_DOORBELL", DION_CFG_ENUM, "auto", "auto|gpu|cpu",
     "gdaki on an mlx5 NIC: who writes the NIC's doorbell register for GPU threads. auto: the GPU, through "
     "the UAR page mapped into it, when the nvidia module allows that (NVreg_RegistryDwords="
     "\"PeerMappingOverride=1;\"), else a CPU thread that copies each doorbell from host memory (slower, "
     "said in the log and by dion-info). gpu: fail instead of falling back. cpu: always the CPU thread. The "
     "gdaki mlx5 path also reads DION_IB_HCA, DION_IB_PORT, DION_IB_GID_INDEX, DION_IB_TIMEOUT, "
     "DION_IB_RETRY_CNT, DION_IB_SL and DION_IB_TC.",
     NULL},
    /* bootstrap */
    {"DION_BOOTSTRAP_TIMEOUT", DION_CFG_DURATION, "60s", NULL,
     "Bound on every bootstrap wait: connecting to the root and to ring neighbours, and each collective.",
     NULL},
    {"DION_BOOTSTRAP_IFNAME", DION_CFG_STRING, NULL, NULL,
     "Network interface whose IPv4 address the bootstrap root listens on; unset: the first interface that "
     "is up and not loopback, else loopback.",
     NULL},
    {"DION_RANK", DION_CFG_INT, NULL, NULL, "This process's rank for dion_comm_init_env.", NULL},
    {"DION_NRANKS", DION_CFG_INT, NULL, NULL, "Number of ranks for dion_comm_init_env.", NULL},
    {"DION_ROOT", DION_CFG_STRING, NULL, NULL,
     "host:port of the bootstrap root for dion_comm_init_env; rank 0 listens there. Unset: MASTER_ADDR and "
     "MASTER_PORT+DION_ROOT_PORT_OFFSET, else a rendezvous file in DION_TMPDIR (single-node jobs).",
     NULL},
    {"DION_ROOT_PORT_OFFSET", DION_CFG_INT, "1", NULL,
     "Added to MASTER_PORT when the root address comes from torchrun's variables, so that DION does not "
     "take the port of torch's own store.",
     NULL},
    {"DION_SECRET", DION_CFG_STRING, NULL, NULL,
     "Shared secret for env initialization with DION_ROOT or MASTER_ADDR; ranks prove it to each other "
     "without sending it. Unset: derived from the launcher's job id, which keeps jobs apart but does not "
     "stop a hostile local user; with neither, env initialization with a root address fails.",
     NULL},
    {"DION_UNIQUE_ID", DION_CFG_STRING, NULL, NULL,
     "A whole unique id in hex (set by dionrun); with DION_RANK and DION_NRANKS it takes precedence over "
     "DION_ROOT.",
     NULL},
    {"DION_LOCAL_RANK", DION_CFG_INT, NULL, NULL,
     "Rank within the node, set by dionrun. Without DION_DEVICE, comm initialization takes GPU (local rank "
     "modulo visible GPUs) unless the application chose a device first; this variable is looked at first, "
     "then OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK, MPI_LOCALRANKID.",
     NULL},
    /* proxy engine ofi (libfabric) */
    {"DION_OFI_PROVIDER", DION_CFG_STRING, NULL, NULL,
     "libfabric provider for the ofi engine (e.g. efa, cxi, verbs;ofi_rxm, tcp, shm). Unset: the best that "
     "fi_getinfo offers with RDM endpoints, RMA and atomics, in the order efa, cxi, verbs;ofi_rxm, psm3, "
     "opx, tcp, shm; others (sockets, udp;ofi_rxd) only when named.",
     NULL},
    {"DION_OFI_DOMAIN", DION_CFG_STRING, NULL, NULL,
     "libfabric domain (NIC or interface, e.g. eth0, lo) within the provider; unset: the first it lists.",
     NULL},
    {"DION_OFI_ORDER", DION_CFG_ENUM, "auto", "auto|msg_order|fence|wait",
     "How the ofi engine keeps a signal behind its data. msg_order: the provider's message order "
     "(FI_ORDER_WAW...); fence: FI_FENCE; wait: hold the signal until earlier operations to that peer "
     "completed. auto: msg_order for tcp, and for shm where it grants FI_ORDER_WAW and FI_ORDER_RAW (shm's "
     "writes then go without FI_DELIVERY_COMPLETE and a later fetch to the peer confirms them), else wait.",
     NULL},
    {"DION_OFI_SIGNAL", DION_CFG_ENUM, "auto", "auto|fetch|plain|msg",
     "How the ofi engine posts signals (atomic add and set) where writes are confirmed by a later fetch "
     "(shm with message order). fetch: fetching atomics, complete once applied; plain: plain atomics, "
     "which the target applies with less work, confirmed like writes by a later fetch (one more "
     "operation per lone signal); msg (shm with message order; tcp only where the provider injects 152 "
     "bytes or more, which libfabric 1.17's tcp;ofi_rxm (64) does not: there signals stay atomics, with a "
     "warning): a put_signal of up to 256 bytes into host memory, and a signal alone, go as one message that "
     "the target's proxy applies (data, then the signal word, with a CPU atomic) and acknowledges. auto: "
     "fetch.",
     NULL},
    {"DION_OFI_OP_TIMEOUT", DION_CFG_DURATION, "30s", NULL,
     "An ofi operation without a completion after this long is reported as failed (DION_ERR_TIMEOUT), so "
     "that a provider that drops an error (shm after a refused access) or a vanished peer cannot hang the "
     "proxy; 0 waits forever.",
     NULL},
    {"DION_OFI_PEER_OPS", DION_CFG_INT, "0", NULL,
     "Operations the ofi engine keeps unconfirmed per peer (posted, not yet known processed by it); more "
     "wait in the engine's queue for that peer, so that the provider is not driven into refusing posts "
     "(-FI_EAGAIN) that are then retried on every pass. 0: no bound (the default: on the H200 the bound "
     "removed shm's refusals but cost message rate). -1: for shm, a quarter of the target's command queue "
     "shared by the peers that send to it, at least 16; no bound for other providers.",
     NULL},
    {"DION_OFI_LIBRARY", DION_CFG_STRING, "libfabric.so.1", NULL,
     "The libfabric shared library the ofi engine loads at run time (a name for the loader's search, or a "
     "path).",
     NULL},
    /* read from launchers */
    {"OMPI_COMM_WORLD_RANK", DION_CFG_INT, NULL, NULL, "Rank under Open MPI's mpirun.", "launcher"},
    {"OMPI_COMM_WORLD_SIZE", DION_CFG_INT, NULL, NULL, "Number of ranks under Open MPI's mpirun.",
     "launcher"},
    {"OMPI_COMM_WORLD_LOCAL_SIZE", DION_CFG_INT, NULL, NULL,
     "Ranks on this node under Open MPI; decides whether a rendezvous file can be used.", "launcher"},
    {"OMPI_COMM_WORLD_LOCAL_RANK", DION_CFG_INT, NULL, NULL,
     "Rank within the node under Open MPI: picks the GPU.", "launcher"},
    {"PMIX_NAMESPACE", DION_CFG_STRING, NULL, NULL,
     "Job id under Open MPI (PMIx): names the rendezvous file.", "launcher"},
    {"OMPI_MCA_ess_base_jobid", DION_CFG_STRING, NULL, NULL,
     "Job id under Open MPI without PMIx: names the rendezvous file.", "launcher"},
    {"OMPI_MCA_orte_hnp_uri", DION_CFG_STRING, NULL, NULL,
     "Job id under older Open MPI (ORTE): names the rendezvous file; seeds the secret without DION_SECRET.",
     "launcher"},
    {"SLURM_PROCID", DION_CFG_INT, NULL, NULL, "Rank under srun.", "launcher"},
    {"SLURM_NTASKS", DION_CFG_INT, NULL, NULL, "Number of ranks under srun.", "launcher"},
    {"SLURM_NNODES", DION_CFG_INT, NULL, NULL, "Nodes of the Slurm job; more than 1 needs DION_ROOT.",
     "launcher"},
    {"SLURM_LOCALID", DION_CFG_INT, NULL, NULL, "Rank within the node under srun: picks the GPU.",
     "launcher"},
    {"SLURM_JOB_ID", DION_CFG_STRING, NULL, NULL, "Names the rendezvous file under Slurm.", "launcher"},
    {"SLURM_STEP_ID", DION_CFG_STRING, NULL, NULL, "Names the rendezvous file under Slurm.", "launcher"},
    {"RANK", DION_CFG_INT, NULL, NULL, "Rank under torchrun.", "launcher"},
    {"WORLD_SIZE", DION_CFG_INT, NULL, NULL, "Number of ranks under torchrun.", "launcher"},
    {"LOCAL_RANK", DION_CFG_INT, NULL, NULL, "Rank within the node under torchrun: picks the GPU.",
     "launcher"},
    {"MPI_LOCALRANKID", DION_CFG_INT, NULL, NULL,
     "Rank within the node under MPICH's or Intel MPI's Hydra launcher: picks the GPU.", "launcher"},
    {"MASTER_ADDR", DION_CFG_STRING, NULL, NULL, "torchrun's rendezvous host; DION's root runs there.",
     "launcher"},
    {"MASTER_PORT", DION_CFG_INT, NULL, NULL,
     "torchrun's store port; DION listens on it plus DION_ROOT_PORT_OFFSET.", "launcher"},
    {"TORCHELASTIC_RUN_ID", DION_CFG_STRING, NULL, NULL, "torchrun's job id: seeds the default secret.",
     "launcher"},
    /* dionrun */
    {"CUDA_VISIBLE_DEVICES", DION_CFG_STRING, NULL, NULL,
     "dionrun counts the GPUs it hands out from this list when set (else from the driver's list).",
     "dionrun"},
    {"CUDA_MPS_PIPE_DIRECTORY", DION_CFG_STRING, NULL, NULL,
     "MPS pipe folder. dionrun --mps uses a running MPS daemon found here, else starts its own in a private "
     "folder and sets this for the ranks. libdion looks for the daemon's control pipe here (else in "
     "/tmp/nvidia-mps) when the driver cannot say whether MPS is on, to warn about ranks sharing a GPU "
     "without it.",
     NULL},
    {"PATH", DION_CFG_STRING, NULL, NULL,
     "dionrun finds nvidia-cuda-mps-control here, and for --hosts the ip command (else in /usr/sbin, /sbin).",
     "dionrun"},
};
const int dion__cfg_count = (int)(sizeof dion__cfg_table / sizeof dion__cfg_table[0]);

const dion__cfg_entry_t *dion__cfg_find(const char *name)
{
    for (int i = 0; i < dion__cfg_count; i++)
        if (strcmp(dion__cfg_table[i].name, name) == 0) return &dion__cfg_table[i];
    return NULL;
}

const char *dion__cfg_env(const char *name)
{
    if (!dion__cfg_find(name)) {
        /* A variable missing from the table is a bug of ours: the docs would not mention it. */
        DION_LOG(DION_LOG_ERROR,
                 "internal: environment variable %s is read but not in the configuration table", name);
        return NULL;
    }
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

const char *dion__cfg_str(const char *name)
{
    const char *v = dion__cfg_env(name);
    if (v) return v;
    const dion__cfg_entry_t *e = dion__cfg_find(name);
    return e ? e->def : NULL;
}

dion_status_t dion__cfg_int(const char *name, long long min, long long max, long long *out)
{
    const char *v = dion__cfg_str(name);
    if (!v) return DION_ERR_INVALID_ARG; /* unset and no default: caller decides, no sentence */
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    int digits = end != v; /* checked before skipping trailing blanks: a value of blanks is no number */
    while (end && isspace((unsigned char)*end)) end++;
    if (errno || !digits || (end && *end))
        return dion__error(DION_ERR_INVALID_ARG,
                           "%s='%s' is not an integer; set it to a whole number in [%lld, %lld]", name, v,
                           min, max);
    if (x < min || x > max)
        return dion__error(DION_ERR_INVALID_ARG, "%s=%lld is out of range; it must lie in [%lld, %lld]", name,
                           x, min, max);
    *out = x;
    return DION_SUCCESS;
}

dion_status_t dion__cfg_bool(const char *name, int *out)
{
    const char *v = dion__cfg_str(name);
    if (!v) {
        *out = 0;
        return DION_SUCCESS;
    }
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on")) {
        *out = 1;
        return DION_SUCCESS;
    }
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off")) {
        *out = 0;
        return DION_SUCCESS;
    }
    return dion__error(DION_ERR_INVALID_ARG, "%s='%s' is not a boolean; use 1 or 0", name, v);
}

dion_status_t dion__parse_duration_ns(const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(text, &end);
    if (errno || end == text || !(x >= 0)) return DION_ERR_INVALID_ARG; /* !(x >= 0) also rejects NaN */
    double mult = 1e9;                                                  /* a bare number is seconds */
    if (*end) {
        if (!strcmp(end, "ns"))
            mult = 1;
        else if (!strcmp(end, "us"))
            mult = 1e3;
        else if (!strcmp(end, "ms"))
            mult = 1e6;
        else if (!strcmp(end, "s"))
            mult = 1e9;
        else if (!strcmp(end, "m"))
            mult = 60e9;
        else if (!strcmp(end, "h"))
            mult = 3600e9;
        else
            return DION_ERR_INVALID_ARG;
    }
    double ns = x * mult;
    if (ns > 1.8e19) return DION_ERR_INVALID_ARG;
    *out = (uint64_t)ns;
    return DION_SUCCESS;
}

dion_status_t dion__cfg_duration_ns(const char *name, uint64_t *out)
{
    const char *v = dion__cfg_str(name);
    if (!v) return DION_ERR_INVALID_ARG;
    if (dion__parse_duration_ns(v, out) != DION_SUCCESS)
        return dion__error(
            DION_ERR_INVALID_ARG,
            "%s='%s' is not a duration; write a number with a unit (500ms, 30s, 2m; a bare number "
            "is seconds)",
            name, v);
    return DION_SUCCESS;
}

dion_status_t dion__cfg_enum(const char *name, int *out)
{
    const dion__cfg_entry_t *e = dion__cfg_find(name);
    const char *v = dion__cfg_str(name);
    if (!e || !e->choices || !v) return DION_ERR_INTERNAL;
    int idx = 0;
    const char *p = e->choices;
    size_t vlen = strlen(v);
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncasecmp(p, v, len) == 0) {
            *out = idx;
            return DION_SUCCESS;
        }
        idx++;
        if (!bar) break;
        p = bar + 1;
    }
    return dion__error(DION_ERR_INVALID_ARG, "%s='%s' is not one of %s", name, v, e->choices);
}

static const char *dion__cfg_type_name(const dion__cfg_entry_t *e)
{
    switch (e->type) {
    case DION_CFG_INT:
        return "integer";
    case DION_CFG_BOOL:
        return "boolean";
    case DION_CFG_DURATION:
        return "duration";
    case DION_CFG_STRING:
        return "string";
    case DION_CFG_ENUM:
        return e->choices;
    }
    return "?";
}

void dion__cfg_markdown(FILE *out)
{
    fprintf(out, "# Configuration\n\n");
    fprintf(
        out,
        "Every environment variable DION reads. This page is generated from the table in `src/config.c` by\n"
        "`dion-info --config-markdown`; the test `unit_config_docs` fails when the two differ.\n\n"
        "Durations take a unit (`ns`, `us`, `ms`, `s`, `m`, `h`); a bare number is seconds. Booleans are "
        "`1`/`0` (also `true`/`false`, `yes`/`no`, `on`/`off`).\n\n");
    const char *sections[] = {NULL, "launcher", "dionrun"};
    const char *titles[] = {"Read by libdion", "Read from launchers (set by mpirun, srun or torchrun)",
                            "Read by dionrun"};
    for (int s = 0; s < 3; s++) {
        fprintf(out, "## %s\n\n| variable | type | default | meaning |\n|---|---|---|---|\n", titles[s]);
        for (int i = 0; i < dion__cfg_count; i++) {
            const dion__cfg_entry_t *e = &dion__cfg_table[i];
            int match = sections[s] ? (e->reader && !strcmp(e->reader, sections[s])) : e->reader == NULL;
            if (!match) continue;
            char type[128];
            size_t k = 0;
            for (const char *t = dion__cfg_type_name(e); *t && k < sizeof type - 3; t++) {
                if (*t == '|') type[k++] = '\\'; /* a bare bar would end the table cell */
                type[k++] = *t;
            }
            type[k] = 0;
            fprintf(out, "| `%s` | %s | %s | %s |\n", e->name, type, e->def ? e->def : "(unset)", e->help);
        }
        fprintf(out, "\n");
    }
}
