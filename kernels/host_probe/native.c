/* Small native functions for the host micro-probes (kernels/host_probe/micro.py) and the studies'
 * real-threads probes (spin, sleep, copy, each stamped).
 *
 * Loaded twice through ctypes: as a PyDLL (calls keep the GIL) and as a CDLL (calls release it),
 * so that the same machine code runs with either GIL behaviour. Timestamps are CLOCK_MONOTONIC
 * nanoseconds, the clock behind Python's time.perf_counter_ns() on Linux, so native and Python
 * stamps can be compared directly.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t infralab_now_ns(void) { return now_ns(); }

/* Busy-wait for `ns` nanoseconds, as a host thread polling a device flag does (DeepEP's dispatch
 * waits on the CPU for the GPU's receive counts). stamps[0], stamps[1]: start and end. */
void infralab_spin_ns(uint64_t ns, uint64_t *stamps) {
    uint64_t start = now_ns();
    uint64_t now = start;
    while (now - start < ns) {
        now = now_ns();
    }
    stamps[0] = start;
    stamps[1] = now;
}

/* Spin like infralab_spin_ns; cpus[0], cpus[1]: the CPU it ran on at the start and at the end
 * (sched_getcpu), so that a caller sees whether it was moved to another CPU meanwhile. */
void infralab_spin_ns_cpu(uint64_t ns, uint64_t *stamps, int *cpus) {
    cpus[0] = sched_getcpu();
    infralab_spin_ns(ns, stamps);
    cpus[1] = sched_getcpu();
}

/* Block (sleep) for `ns` nanoseconds: a host thread waiting on the device without burning a core
 * (a blocking synchronise). stamps[0], stamps[1]: start and end. */
void infralab_sleep_ns(uint64_t ns, uint64_t *stamps) {
    struct timespec ts;
    stamps[0] = now_ns();
    ts.tv_sec = (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    while (nanosleep(&ts, &ts) != 0) {
    }
    stamps[1] = now_ns();
}

/* Spin like infralab_spin_ns, reading *counter at the start and at the end: if another Python
 * thread that increments the counter ran during the call, after > before. */
void infralab_spin_observe(uint64_t ns, const volatile long *counter, long *before, long *after) {
    uint64_t start = now_ns();
    *before = *counter;
    while (now_ns() - start < ns) {
    }
    *after = *counter;
}

/* Copy `n` bytes (the data movement of a KV transfer). stamps: start and end. */
void infralab_copy(void *dst, const void *src, size_t n, uint64_t *stamps) {
    stamps[0] = now_ns();
    memcpy(dst, src, n);
    stamps[1] = now_ns();
}
