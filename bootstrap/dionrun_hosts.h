/* dionrun --hosts: each rank on a simulated host of its own (network, UTS, mount and IPC namespaces), the
 * hosts joined by a bridge in a switch namespace where dionrun itself lives and hosts the bootstrap root. */
#ifndef DIONRUN_HOSTS_H
#define DIONRUN_HOSTS_H

#include <stddef.h>

#define HOSTS_MAX         253      /* rank r is 10.231.0.(r+1)/24; the bridge is .254 */
#define HOSTS_BRIDGE_IF   "dionbr" /* in the switch namespace: the root's interface */
#define HOSTS_RANK_IF     "dion0"  /* in every host namespace: the rank's interface */
#define HOSTS_BRIDGE_ADDR "10.231.0.254"

typedef struct hosts hosts_t;

/* Creates the namespaces and links and moves this process into the switch namespace; ip is the path of the
 * ip command (NULL: not found). Returns NULL when this machine cannot do it (not root, no CAP_SYS_ADMIN, no
 * ip command, no veth or bridge support), with a sentence in why. Nothing is named in the root namespace: the
 * kernel removes every namespace and link once dionrun and its ranks are gone, however they end. */
hosts_t *hosts_create(int nranks, const char *ip, char *why, size_t cap);

/* In the forked child, before exec: joins rank's host (network namespace, own hostname, private /tmp and
 * /dev/shm, own IPC namespace) and asks to be SIGKILLed when dionrun dies. Async-signal-safe. Returns 0, or
 * the errno of the step that failed. */
int hosts_enter(const hosts_t *h, int rank);

/* The hostname rank gets. */
const char *hosts_name(const hosts_t *h, int rank);

void hosts_destroy(hosts_t *h);

#endif
