/* A shifted wall clock for one node process, preloaded by the harness (LD_PRELOAD, see
 * harness/clockfault.py) into a node started with clock control "wall+rate".
 *
 * clock_gettime(CLOCK_REALTIME / CLOCK_REALTIME_COARSE), gettimeofday() and time() return the
 * real wall clock plus a shift read from the file named by MQLAB_WALL_SHIFT_FILE: signed seconds
 * as text ("+0", "+12", "-6.000", "+1.500"), re-read at most every MQLAB_WALL_SHIFT_REREAD_MS of
 * the monotonic clock (default 100). A missing or unreadable file keeps the shift last read.
 *
 * Nothing else is wrapped, on purpose. Debian's libfaketime, used here before, also wraps
 * epoll_wait, poll, select, the pthread condition waits, sem_timedwait, nanosleep and stat: in
 * six gray runs a broker under it went 0.3-1.6 s without a single event (a sampled one had its
 * event loop stuck 360 ms in pthread_mutex_lock), where the same six runs without it never went
 * 0.1 s; and time.sleep failed under it with EINVAL. The monotonic clock is never shifted: every lease and timer of
 * a node runs on it (through the node's own Clock), and a wall-clock step must not move them.
 *
 * Not a Python module: built by setup.py as an optional extension only to reuse its compiler run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL
#define DEFAULT_REREAD_NS (100LL * 1000000LL)

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic(clock_gettime_fn) real_clock_gettime_fn;
static _Atomic int64_t shift_ns;
static _Atomic int64_t next_read_mono_ns; /* 0: read at the first call */
static _Atomic int64_t reread_ns = -1;    /* -1: not parsed from the environment yet */

static clock_gettime_fn real_clock_gettime(void)
{
    clock_gettime_fn fn = atomic_load_explicit(&real_clock_gettime_fn, memory_order_acquire);
    if (fn == NULL) {
        fn = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        atomic_store_explicit(&real_clock_gettime_fn, fn, memory_order_release);
    }
    return fn;
}

/* "+12", "-6.000", "1.5" -> ns; returns 0 on success. Hand-parsed: no locale, no allocation. */
static int parse_seconds(const char *text, int64_t *out)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    int negative = 0;
    if (*p == '+' || *p == '-') negative = (*p++ == '-');
    if (*p < '0' || *p > '9') return -1;
    int64_t seconds = 0;
    while (*p >= '0' && *p <= '9') {
        if (seconds > 100LL * 365 * 24 * 3600) return -1; /* a century: a typo, not a shift */
        seconds = seconds * 10 + (*p++ - '0');
    }
    int64_t fraction_ns = 0, scale = NS_PER_S / 10;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            fraction_ns += (*p++ - '0') * scale;
            scale /= 10;
        }
    }
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p != '\0') return -1;
    int64_t total = seconds * NS_PER_S + fraction_ns;
    *out = negative ? -total : total;
    return 0;
}

static void read_shift_file(void)
{
    const char *path = getenv("MQLAB_WALL_SHIFT_FILE");
    if (path == NULL) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    int64_t parsed;
    if (parse_seconds(buf, &parsed) == 0) atomic_store_explicit(&shift_ns, parsed, memory_order_relaxed);
}

static int64_t reread_interval_ns(void)
{
    int64_t interval = atomic_load_explicit(&reread_ns, memory_order_relaxed);
    if (interval < 0) {
        const char *text = getenv("MQLAB_WALL_SHIFT_REREAD_MS");
        interval = text != NULL ? atoll(text) * 1000000LL : DEFAULT_REREAD_NS;
        if (interval <= 0) interval = DEFAULT_REREAD_NS;
        atomic_store_explicit(&reread_ns, interval, memory_order_relaxed);
    }
    return interval;
}

/* The shift in force; one caller per interval re-reads the file (the others use the last value). */
static int64_t current_shift_ns(void)
{
    struct timespec mono;
    if (real_clock_gettime()(CLOCK_MONOTONIC_COARSE, &mono) == 0) {
        int64_t now = mono.tv_sec * NS_PER_S + mono.tv_nsec;
        int64_t due = atomic_load_explicit(&next_read_mono_ns, memory_order_relaxed);
        if (now >= due && atomic_compare_exchange_strong(&next_read_mono_ns, &due, now + reread_interval_ns()))
            read_shift_file();
    }
    return atomic_load_explicit(&shift_ns, memory_order_relaxed);
}

static void add_ns(struct timespec *ts, int64_t delta)
{
    int64_t total = ts->tv_sec * NS_PER_S + ts->tv_nsec + delta;
    int64_t sec = total / NS_PER_S, nsec = total % NS_PER_S;
    if (nsec < 0) {
        nsec += NS_PER_S;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)nsec;
}

int clock_gettime(clockid_t clock_id, struct timespec *ts)
{
    int result = real_clock_gettime()(clock_id, ts);
    if (result == 0 && (clock_id == CLOCK_REALTIME || clock_id == CLOCK_REALTIME_COARSE))
        add_ns(ts, current_shift_ns());
    return result;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz; /* obsolete: Linux fills it with zeros at most */
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    if (result == 0) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return result;
}

time_t time(time_t *out)
{
    struct timespec ts;
    time_t now = clock_gettime(CLOCK_REALTIME, &ts) == 0 ? ts.tv_sec : (time_t)-1;
    if (out != NULL) *out = now;
    return now;
}
