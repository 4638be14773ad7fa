/* Fuzzes the memory-handle messages of src/fdpass.c: datagrams with fuzzed payloads, zero to three attached
 * descriptors and the kernel's credentials arrive on a communicator's Unix socket (a socket pair here), and
 * dion__ux_recv takes them one by one. Checked: a descriptor is accepted only from a local rank other than
 * this one whose pid is the sender's, at most one per rank, and is the descriptor that was sent; afterwards
 * no descriptor is left open (a rejected or surplus descriptor must be closed). */
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "src/fdpass.c"

#define MAX_RANKS  8
#define MAX_DGRAMS 8

static dev_t devnull_rdev;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_log_everything();
    struct stat sb;
    if (stat("/dev/null", &sb) == 0) devnull_rdev = sb.st_rdev;
    return 0;
}

static void send_dgram(int fd, const void *payload, size_t len, int nfds)
{
    int fds[3] = {-1, -1, -1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof fds)];
    } ctl;
    struct iovec iov = {(void *)payload, len};
    struct msghdr m;
    memset(&m, 0, sizeof m);
    memset(&ctl, 0, sizeof ctl);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    for (int i = 0; i < nfds; i++) fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nfds > 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t r = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    FUZZ_CHECK(r == (ssize_t)len, "sendmsg: %s", r < 0 ? strerror(errno) : "short");
    for (int i = 0; i < nfds; i++) close(fds[i]); /* the receiver holds its own copies now */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int nranks = 2 + fuzz_u8(&in) % (MAX_RANKS - 1);
    int rank = fuzz_u8(&in) % nranks;
    uint8_t local = fuzz_u8(&in), same_pid = fuzz_u8(&in);
    uint32_t tag = fuzz_u8(&in) % 4;

    int baseline = fuzz_open_fds();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    int one = 1;
    setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);

    struct dion_comm c;
    dion__rank_info_t info[MAX_RANKS];
    memset(&c, 0, sizeof c);
    memset(info, 0, sizeof info);
    c.rank = rank;
    c.nranks = nranks;
    c.info = info;
    c.ux_fd = sv[0];
    for (int r = 0; r < nranks; r++) {
        info[r].host_key = (r == rank || (local >> r & 1)) ? 1 : 2;
        info[r].pid = (same_pid >> r & 1) ? (int32_t)getpid() : (int32_t)getpid() + 1 + r;
        c.local_size += info[r].host_key == 1;
    }

    uint8_t keys[MAX_RANKS][DION__SECRET_LEN];
    for (int r = 0; r < MAX_RANKS; r++)
        for (int k = 0; k < DION__SECRET_LEN; k++) keys[r][k] = (uint8_t)(r * 37 + k);
    struct dion__fdpass fdp = {.round = 1 + fuzz_u8(&in) % 2, .keys = keys};
    c.fdp = &fdp;

    int ndgrams = 0;
    while (fuzz_left(&in) > 0 && ndgrams < MAX_DGRAMS) {
        uint8_t kind = fuzz_u8(&in);
        int nfds = kind & 3;
        uint8_t payload[48];
        size_t len;
        if (kind & 0x80) { /* an encoded message; the flags pick which fields are fuzzed */
            dion__fdmsg_t m;
            memset(&m, 0, sizeof m);
            m.from = fuzz_u8(&in) % (uint32_t)nranks;
            m.to = (kind & 0x40) ? fuzz_u8(&in) : (uint32_t)rank;
            m.tag = (kind & 0x20) ? fuzz_u8(&in) % 4 : tag;
            m.nfds = (kind & 0x10) ? fuzz_u8(&in) % 3 : (uint32_t)(nfds > 0);
            m.round = (kind & 0x08) ? fuzz_u8(&in) % 3 : fdp.round;
            dion__fdmsg_encode(&m, keys[(kind & 0x04) ? (m.from + 1) % (uint32_t)nranks : m.from], payload);
            len = DION__FDMSG_LEN;
        } else {
            len = (kind >> 2) % sizeof payload;
            for (size_t i = 0; i < len; i++) payload[i] = fuzz_u8(&in);
        }
        dion__fdmsg_t m;
        if (dion__fdmsg_parse(payload, len, &m) == DION_SUCCESS) {
            uint8_t again[DION__FDMSG_LEN];
            FUZZ_CHECK(len == DION__FDMSG_LEN && m.nfds <= 1, "parsed %zu bytes, %u descriptors", len,
                       m.nfds);
            dion__fdmsg_encode(&m, keys[0], again);
            FUZZ_CHECK(memcmp(again, payload, 32) == 0, "encode(parse(x)) differs from x");
        }
        send_dgram(sv[1], payload, len, nfds);
        ndgrams++;
    }

    int fds[MAX_RANKS];
    for (int r = 0; r < MAX_RANKS; r++) fds[r] = -1;
    uint8_t got[MAX_RANKS] = {0};
    const char *why = NULL;
    int accepted = 0;
    for (int i = 0; i <= ndgrams; i++) {
        dion_status_t st = dion__ux_recv(&c, tag, fds, got, &why);
        if (st == DION_ERR_TIMEOUT) break;
        FUZZ_CHECK(i < ndgrams, "received more messages than were sent");
        if (st == DION_SUCCESS)
            accepted++;
        else
            FUZZ_CHECK(st == DION_ERR_INVALID_ARG && why, "rejection (%s) without a reason",
                       dion_status_string(st));
    }
    FUZZ_CHECK(dion__ux_recv(&c, tag, fds, got, &why) == DION_ERR_TIMEOUT, "messages left unread");
    int gots = 0;
    for (int r = 0; r < MAX_RANKS; r++) gots += got[r];
    FUZZ_CHECK(gots == accepted, "%d ranks marked for %d accepted messages", gots, accepted);
    int nfds_got = 0;
    for (int r = 0; r < MAX_RANKS; r++) {
        if (fds[r] < 0) continue;
        nfds_got++;
        FUZZ_CHECK(r < nranks && r != rank && info[r].host_key == 1, "descriptor accepted from rank %d", r);
        FUZZ_CHECK(info[r].pid == (int32_t)getpid(), "descriptor accepted for rank %d from another pid", r);
        FUZZ_CHECK(got[r], "descriptor of rank %d without its message marked", r);
        struct stat sb;
        FUZZ_CHECK(fstat(fds[r], &sb) == 0 && sb.st_rdev == devnull_rdev, "rank %d: not the sent descriptor",
                   r);
        close(fds[r]);
    }
    FUZZ_CHECK(nfds_got <= accepted, "%d descriptors from %d accepted messages", nfds_got, accepted);
    close(sv[0]);
    close(sv[1]);
    FUZZ_CHECK(fuzz_open_fds() == baseline, "descriptors leaked (%d open, %d before)", fuzz_open_fds(),
               baseline);
    return 0;
}
