/* goggles' lockstep for Betaflight's SITL: preloaded (LD_PRELOAD) into the firmware's process, it makes
 * the firmware's clock goggles' sim time and its links one socket of goggles', so that a flight is the
 * same flight at any load, and any number of firmwares run side by side.
 *
 * What the SITL does (src/platform/SIMULATOR/sitl.c, udplink.c, serial_tcp.c), and what this file
 * answers it:
 *   - All of its time is clock_gettime(CLOCK_MONOTONIC) and nanosleep. Here the clock is virtual:
 *     it stands still until the main thread moves it. Each of the main thread's clock reads moves it
 *     by READ_COST_NS (the scheduler polls the clock for the gyro task's deadline, and must see it
 *     come), each nanosleep by the time asked. Time never passes goggles' limit in a sleep: the main
 *     thread waits there, at the top of its loop, holding none of the firmware's locks, until goggles
 *     moves the limit. Other threads read the clock as it stands and sleep in wall time.
 *   - Its state and RC links (UDP 9003, 9004) are served from goggles' socket: a tick's packets go
 *     to the firmware's own receiving threads while its main thread waits, and the main thread goes
 *     on only once each thread has taken its packet and come back for the next (sitl.c's
 *     updateState has run). The state packet's time stamp becomes the tick's number: a second a
 *     tick, past the SITL's 20 ms limit for re-estimating its clock's rate ("simRate"), which so
 *     stays 1.0: its micros() is this clock, exactly.
 *   - Its motor outputs (the servo packet to UDP 9002) come back on goggles' socket; the raw PWM
 *     packet (9001, RealFlight's) is dropped.
 *   - Its UARTs' TCP ports (5761...) are bound to a free port on the loopback, told to goggles. Its
 *     TCP thread (dyad, which is not thread-safe: the main thread adds its listening stream to the
 *     list the TCP thread walks and prunes) takes turns with the main thread: it handles what select
 *     gave it only while the main thread waits at goggles' limit, and the main thread goes on only
 *     once the TCP thread is back in select. The bytes goggles sends (CLI, MSP) reach the firmware
 *     before the tick that follows, counted when the TCP thread comes back to select.
 *
 * goggles' socket (SOCK_SEQPACKET, the descriptor in $GOGGLES_FC_FD) carries fixed-size messages,
 * little-endian, in goggles/firmware/lockstep.py's layout. What the firmware sends is numbered by the
 * tick it belongs to, and goggles may go on once a tick's motor outputs came, while the firmware runs
 * the rest of the tick's loops: the next tick waits in the socket until its main thread is at the limit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define READ_COST_NS 200
#define PORT_PWM_RAW 9001
#define PORT_PWM 9002
#define PORT_STATE 9003
#define PORT_RC 9004
#define TCP_FIRST 5761
#define TCP_LAST 5799
#define STATE_SIZE 144
#define RC_SIZE 40
#define SERVO_SIZE 16

enum { MSG_TICK = 1, MSG_PORT = 2, MSG_MOTORS = 3, MSG_IDLE = 4 };

struct tick {
    uint32_t kind, flags; /* flags: 1 RC, 2 state */
    int64_t limit_ns;
    uint64_t tcp_bytes, tcp_accepts;
    uint8_t rc[RC_SIZE];
    uint8_t state[STATE_SIZE];
};
struct port_msg { uint32_t kind, asked, bound, pad; };
struct motors_msg { uint32_t kind, pad; int64_t now_ns; uint64_t tick; uint8_t servo[SERVO_SIZE]; };
struct idle_msg { uint32_t kind, pad; int64_t now_ns; uint64_t tick, tcp_bytes, tcp_accepts; };

struct link {
    int fd;
    int full;          /* a packet waits to be taken */
    int taken;         /* taken, its thread not yet back for the next */
    uint64_t sent, applied;
    uint8_t packet[STATE_SIZE];
    size_t size;
};

static int ctl = -1;
static pid_t main_tid;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int64_t now_ns;          /* the virtual clock (atomic reads outside mu) */
static int64_t limit_ns;        /* goggles' limit */
static uint64_t gen, idle_gen;  /* the limit's moves; the move the main thread last waited at */
static int main_idle;
static double stamp;            /* the state packets' time stamps: 1, 2, 3 ... */
static uint64_t ticks;          /* the ticks goggles sent: what the firmware answers is numbered by them */
static struct link state_link = {.fd = -1}, rc_link = {.fd = -1};
static uint64_t tcp_delivered, accepts_delivered;
static __thread uint64_t tcp_pending, accepts_pending;
static int tcp_busy; /* threads on their turn (the TCP thread handling what select gave it, a new thread starting) */
static __thread int in_turn;
static int main_leaving; /* the main thread joins the others to exit (sitl.c's systemReset, after a save) */

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static int (*real_nanosleep)(const struct timespec *, struct timespec *);
static int (*real_select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static int (*real_bind)(int, const struct sockaddr *, socklen_t);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_pthread_join)(pthread_t, void **);
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static __thread int role; /* 0: not yet asked, 1: the firmware's main thread, 2: another */
static int is_main(void) {
    if (!role) role = (pid_t)syscall(SYS_gettid) == main_tid ? 1 : 2;
    return role == 1;
}

static void say(const void *msg, size_t size) {
    if (send(ctl, msg, size, MSG_NOSIGNAL) < 0) _exit(0); /* goggles is gone: so is its firmware */
}

/* A thread is back in select: its turn is over, and what it received (the TCP thread) is handed on. */
static void turn_over(void) {
    pthread_mutex_lock(&mu);
    tcp_delivered += tcp_pending;
    accepts_delivered += accepts_pending;
    tcp_pending = accepts_pending = 0;
    if (in_turn) tcp_busy--, in_turn = 0;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int at_limit(const struct tick *t);

/* Its turn: the main thread waits at the limit, and stays there until the thread is back in select. */
static void take_turn(void) {
    pthread_mutex_lock(&mu);
    while (!at_limit(NULL) && !main_leaving) pthread_cond_wait(&cv, &mu);
    tcp_busy++, in_turn = 1;
    pthread_mutex_unlock(&mu);
}

/* A receiving thread came back for the next packet: the last one it took is applied. */
static void came_back(struct link *l) {
    if (l->taken) {
        l->taken = 0;
        l->applied++;
        pthread_cond_broadcast(&cv);
    }
}

static void wait_for(int (*done)(const struct tick *), const struct tick *t) {
    while (!done(t)) pthread_cond_wait(&cv, &mu);
}
static int at_limit(const struct tick *t) { (void)t; return main_idle && idle_gen == gen; }
static int rc_applied(const struct tick *t) { (void)t; return rc_link.applied == rc_link.sent; }
static int state_applied(const struct tick *t) { (void)t; return state_link.applied == state_link.sent; }
static int tcp_in(const struct tick *t) {
    return tcp_delivered >= t->tcp_bytes && accepts_delivered >= t->tcp_accepts && !tcp_busy;
}

static void post(struct link *l, const uint8_t *packet, size_t size) {
    memcpy(l->packet, packet, size);
    l->size = size;
    l->full = 1;
    l->sent++;
    pthread_cond_broadcast(&cv);
}

static volatile const char *waiting = "a tick"; /* what the control thread waits for */

/* SIGUSR1: one line to the log, saying where the lockstep stands (goggles asks when the firmware is
 * silent). Read without the lock: a snapshot, not a promise. */
static void tell(int signal) {
    (void)signal;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "[goggles lockstep] waiting for %s; clock %lld ns, limit %lld ns, main thread %s; tick %llu; "
                     "state sent %llu applied %llu, RC sent %llu applied %llu; TCP bytes %llu, connections %llu\n",
                     waiting, (long long)now_ns, (long long)limit_ns, main_idle ? "at the limit" : "running",
                     (unsigned long long)ticks, (unsigned long long)state_link.sent,
                     (unsigned long long)state_link.applied, (unsigned long long)rc_link.sent,
                     (unsigned long long)rc_link.applied, (unsigned long long)tcp_delivered,
                     (unsigned long long)accepts_delivered);
    if (n > 0) (void)!write(STDOUT_FILENO, line, (size_t)(n < (int)sizeof line ? n : (int)sizeof line - 1));
}

static void *control(void *unused) {
    (void)unused;
    struct tick t;
    for (;;) {
        waiting = "a tick";
        ssize_t n = real_recv(ctl, &t, sizeof t, 0);
        if (n <= 0) _exit(0);
        if (n != sizeof t || t.kind != MSG_TICK) continue;
        pthread_mutex_lock(&mu);
        waiting = "the main thread to reach the last tick's limit";
        wait_for(at_limit, &t);
        __atomic_add_fetch(&ticks, 1, __ATOMIC_SEQ_CST);
        /* Both links at once: their threads touch different state, and the main thread waits for both. */
        if (t.flags & 1) post(&rc_link, t.rc, RC_SIZE);
        if (t.flags & 2) {
            stamp += 1.0;
            memcpy(t.state, &stamp, sizeof stamp);
            post(&state_link, t.state, STATE_SIZE);
        }
        waiting = "its RC thread to take the RC packet";
        wait_for(rc_applied, &t);
        waiting = "its state thread to take the state packet";
        wait_for(state_applied, &t);
        waiting = "its TCP thread to take what goggles sent and end its turn";
        wait_for(tcp_in, &t);
        if (t.limit_ns > limit_ns) {
            limit_ns = t.limit_ns;
            gen++;
            pthread_cond_broadcast(&cv);
        }
        waiting = "the main thread to reach the limit";
        wait_for(at_limit, &t);
        struct idle_msg idle = {MSG_IDLE, 0, __atomic_load_n(&now_ns, __ATOMIC_SEQ_CST), ticks, tcp_delivered,
                                accepts_delivered};
        pthread_mutex_unlock(&mu);
        say(&idle, sizeof idle);
    }
    return NULL;
}

__attribute__((constructor)) static void start(void) {
    real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    real_nanosleep = dlsym(RTLD_NEXT, "nanosleep");
    real_select = dlsym(RTLD_NEXT, "select");
    real_recvfrom = dlsym(RTLD_NEXT, "recvfrom");
    real_recv = dlsym(RTLD_NEXT, "recv");
    real_sendto = dlsym(RTLD_NEXT, "sendto");
    real_bind = dlsym(RTLD_NEXT, "bind");
    real_accept = dlsym(RTLD_NEXT, "accept");
    real_accept4 = dlsym(RTLD_NEXT, "accept4");
    real_pthread_join = dlsym(RTLD_NEXT, "pthread_join");
    real_pthread_create = dlsym(RTLD_NEXT, "pthread_create");
    const char *fd = getenv("GOGGLES_FC_FD");
    if (!fd) return; /* not started by goggles: the firmware runs as it would */
    ctl = atoi(fd);
    main_tid = (pid_t)syscall(SYS_gettid);
    unsetenv("LD_PRELOAD"); /* nothing it starts inherits the lockstep */
    setvbuf(stdout, NULL, _IOLBF, 0); /* its log line by line, as goggles reads it */
    signal(SIGUSR1, tell);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    real_pthread_create(&thread, &attr, control, NULL); /* goggles' own thread: no turns */
}

static int monotonic(clockid_t clock) {
    return clock == CLOCK_MONOTONIC || clock == CLOCK_MONOTONIC_RAW || clock == CLOCK_MONOTONIC_COARSE ||
           clock == CLOCK_BOOTTIME;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (ctl < 0 || !monotonic(clock)) return real_clock_gettime(clock, ts);
    int64_t t = is_main() ? __atomic_add_fetch(&now_ns, READ_COST_NS, __ATOMIC_SEQ_CST)
                          : __atomic_load_n(&now_ns, __ATOMIC_SEQ_CST);
    ts->tv_sec = t / 1000000000;
    ts->tv_nsec = t % 1000000000;
    return 0;
}

int nanosleep(const struct timespec *req, struct timespec *rem) {
    if (ctl < 0 || !is_main()) return real_nanosleep(req, rem);
    int64_t d = (int64_t)req->tv_sec * 1000000000 + req->tv_nsec;
    pthread_mutex_lock(&mu);
    int64_t end = __atomic_load_n(&now_ns, __ATOMIC_SEQ_CST) + d;
    while (end > limit_ns) {
        if (__atomic_load_n(&now_ns, __ATOMIC_SEQ_CST) < limit_ns) __atomic_store_n(&now_ns, limit_ns, __ATOMIC_SEQ_CST);
        main_idle = 1;
        idle_gen = gen;
        pthread_cond_broadcast(&cv);
        while (idle_gen == gen) pthread_cond_wait(&cv, &mu);
        main_idle = 0;
    }
    if (__atomic_load_n(&now_ns, __ATOMIC_SEQ_CST) < end) __atomic_store_n(&now_ns, end, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&mu);
    if (rem) rem->tv_sec = rem->tv_nsec = 0;
    return 0;
}

static struct link *link_of(int fd) {
    if (ctl < 0 || fd < 0) return NULL;
    if (fd == state_link.fd) return &state_link;
    if (fd == rc_link.fd) return &rc_link;
    return NULL;
}

int select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout) {
    struct link *l = readfds && !writefds && !exceptfds && nfds > 0 && FD_ISSET(nfds - 1, readfds)
                         ? link_of(nfds - 1) : NULL;
    if (!l) {
        if (ctl < 0 || is_main()) return real_select(nfds, readfds, writefds, exceptfds, timeout);
        turn_over();
        int ready = real_select(nfds, readfds, writefds, exceptfds, timeout);
        int saved = errno;
        take_turn();
        errno = saved;
        return ready;
    }
    if (in_turn) turn_over();
    pthread_mutex_lock(&mu);
    came_back(l);
    if (!l->full && timeout) {
        struct timespec until;
        real_clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout->tv_sec;
        until.tv_nsec += timeout->tv_usec * 1000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        while (!l->full && pthread_cond_timedwait(&cv, &mu, &until) != ETIMEDOUT) {}
    }
    int ready = l->full;
    pthread_mutex_unlock(&mu);
    FD_ZERO(readfds);
    if (ready) FD_SET(l->fd, readfds);
    return ready;
}

ssize_t recvfrom(int fd, void *buffer, size_t size, int flags, struct sockaddr *from, socklen_t *from_size) {
    struct link *l = link_of(fd);
    if (!l) {
        return real_recvfrom(fd, buffer, size, flags, from, from_size);
    }
    pthread_mutex_lock(&mu);
    if (!l->full) {
        pthread_mutex_unlock(&mu);
        errno = EAGAIN;
        return -1;
    }
    size_t n = l->size < size ? l->size : size;
    memcpy(buffer, l->packet, n);
    l->full = 0;
    l->taken = 1;
    pthread_mutex_unlock(&mu);
    if (from && from_size && *from_size >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in *in = (struct sockaddr_in *)from;
        memset(in, 0, sizeof *in);
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *from_size = sizeof *in;
    }
    return (ssize_t)n;
}

ssize_t recv(int fd, void *buffer, size_t size, int flags) {
    if (ctl < 0) return real_recv(fd, buffer, size, flags);
    ssize_t n = real_recv(fd, buffer, size, flags);
    if (n > 0) tcp_pending += (uint64_t)n;
    return n;
}

static int counted_accept(int fd) {
    if (fd >= 0) accepts_pending++;
    return fd;
}

int accept(int fd, struct sockaddr *address, socklen_t *size) {
    if (ctl < 0) return real_accept(fd, address, size);
    return counted_accept(real_accept(fd, address, size));
}

int accept4(int fd, struct sockaddr *address, socklen_t *size, int flags) {
    if (ctl < 0) return real_accept4(fd, address, size, flags);
    return counted_accept(real_accept4(fd, address, size, flags));
}

ssize_t sendto(int fd, const void *data, size_t size, int flags, const struct sockaddr *to, socklen_t to_size) {
    if (ctl >= 0 && to && to->sa_family == AF_INET && to_size >= sizeof(struct sockaddr_in)) {
        int port = ntohs(((const struct sockaddr_in *)to)->sin_port);
        if (port == PORT_PWM && size >= SERVO_SIZE) {
            struct motors_msg m = {MSG_MOTORS, 0, __atomic_load_n(&now_ns, __ATOMIC_SEQ_CST),
                                   __atomic_load_n(&ticks, __ATOMIC_SEQ_CST), {0}};
            memcpy(m.servo, data, SERVO_SIZE);
            say(&m, sizeof m);
            return (ssize_t)size;
        }
        if (port == PORT_PWM_RAW) return (ssize_t)size;
    }
    return real_sendto(fd, data, size, flags, to, to_size);
}

int bind(int fd, const struct sockaddr *address, socklen_t size) {
    if (ctl < 0 || !address || (address->sa_family != AF_INET && address->sa_family != AF_INET6))
        return real_bind(fd, address, size);
    struct sockaddr_storage local;
    memcpy(&local, address, size < sizeof local ? size : sizeof local);
    int asked;
    if (address->sa_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&local;
        asked = ntohs(in->sin_port);
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        in->sin_port = 0;
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&local;
        asked = ntohs(in6->sin6_port);
        in6->sin6_addr = in6addr_loopback;
        in6->sin6_port = 0;
    }
    int stream = 0;
    socklen_t len = sizeof stream;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &stream, &len);
    stream = stream == SOCK_STREAM;
    if (!stream && (asked == PORT_STATE || asked == PORT_RC)) {
        (asked == PORT_STATE ? &state_link : &rc_link)->fd = fd;
    } else if (!(stream && asked >= TCP_FIRST && asked <= TCP_LAST)) {
        return real_bind(fd, address, size);
    }
    int result = real_bind(fd, (struct sockaddr *)&local, size);
    if (result == 0 && stream) {
        struct sockaddr_storage bound;
        socklen_t bound_size = sizeof bound;
        getsockname(fd, (struct sockaddr *)&bound, &bound_size);
        int port = bound.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&bound)->sin_port)
                                              : ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
        struct port_msg m = {MSG_PORT, (uint32_t)asked, (uint32_t)port, 0};
        say(&m, sizeof m);
    }
    return result;
}

/* The main thread waits for the others to end (it exits): the TCP thread's turns no longer wait for it. */
int pthread_join(pthread_t thread, void **result) {
    if (ctl >= 0 && is_main()) {
        pthread_mutex_lock(&mu);
        main_leaving = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    return real_pthread_join(thread, result);
}

/* The threads the firmware starts (its TCP and UDP threads) begin on a turn: the TCP thread's first pass
 * over dyad's streams (it frees those not yet listening) must not meet the main thread's init. */
struct start { void *(*run)(void *); void *arg; };

static void *started(void *given) {
    struct start start = *(struct start *)given;
    free(given);
    take_turn();
    return start.run(start.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*run)(void *), void *arg) {
    if (ctl < 0 || !is_main()) return real_pthread_create(thread, attr, run, arg);
    struct start *start = malloc(sizeof *start);
    if (!start) return real_pthread_create(thread, attr, run, arg);
    start->run = run, start->arg = arg;
    int result = real_pthread_create(thread, attr, started, start);
    if (result != 0) free(start);
    return result;
}
