/* line-floor.c - the floor of any shared-memory transport between two CPUs: one
 * 8-byte word ping-ponged through a cache line each way between two processes
 * pinned to CPU 0 (echo) and CPU 1 (timing), busy-polled. Prints the one-way time
 * (half a round trip, as tag_lat reports), average, p50 and p99, in ns.
 *
 *   cc -O2 -o line-floor bench/line-floor.c && ./line-floor [ROUND_TRIPS]
 *
 * On these VMs it tells the host's regime: ~60 ns one way when the two vCPUs
 * share a cache, ~245 ns when they do not; every shared-memory tool's latency
 * moves with it (docs/PERFORMANCE.md). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 200000, warm = 1000;
    if (n <= 0) {
        fprintf(stderr, "usage: %s [ROUND_TRIPS > 0]\n", argv[0]);
        return 2;
    }
    volatile uint64_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    volatile uint64_t *ping = m, *pong = m + 16; /* two lines */
    pid_t child = fork();
    if (child == 0) {
        pin(0);
        for (long i = 1; i <= warm + n; i++) {
            while (*ping != (uint64_t)i)
                ;
            *pong = i;
        }
        _exit(0);
    }
    pin(1);
    double *s = malloc(sizeof(double) * n);
    for (long i = 1; i <= warm + n; i++) {
        double t0 = now_ns();
        *ping = i;
        while (*pong != (uint64_t)i)
            ;
        if (i > warm)
            s[i - warm - 1] = (now_ns() - t0) / 2;
    }
    waitpid(child, NULL, 0);
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += s[i];
    qsort(s, n, sizeof(double), by_value);
    printf("line-floor: one way, ns: avg %.1f p50 %.1f p99 %.1f (%ld round trips, CPUs 1 and 0)\n",
           sum / n, s[n / 2], s[n * 99 / 100], n);
    return 0;
}
