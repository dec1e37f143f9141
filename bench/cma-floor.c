/* cma-floor.c - the cost of one process_vm_readv of N bytes from a child's touched memory
 * (mean over a loop): the floor of shm's native RMA and of its rendezvous pull; beside it, in
 * the same run, a user-space memcpy of the same N bytes between two buffers of this process
 * (the copy each side of a push through the ring does, and UCX posix's), and the CMA read
 * issued in chunks of C bytes (one call per chunk, iovec'd: C bytes per iovec, up to 16).
 * cc -O2 -o cma-floor bench/cma-floor.c; taskset -c 1 ./cma-floor 8 [CHUNK] */
#define _GNU_SOURCE
#include <sys/uio.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <signal.h>
#include <stdlib.h>
#define MAXN (16u << 20)
static char buf[MAXN];
static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
int main(int argc, char **argv) {
  size_t n = argc > 1 ? atol(argv[1]) : 8;
  size_t chunk = argc > 2 ? atol(argv[2]) : 0;
  if (n == 0 || n > MAXN) { fprintf(stderr, "N from 1 to %u\n", MAXN); return 2; }
  for (size_t i = 0; i < n; i++) buf[i] = (char)i;
  pid_t c = fork(); usleep(100000);
  if (c == 0) { for (size_t i = 0; i < n; i++) buf[i] = (char)(i + 1); for (;;) pause(); }
  char *dst = malloc(n);
  memset(dst, 1, n);
  struct iovec l = {dst, n}, r = {buf, n};
  int iters = n >= (1 << 20) ? 500 : n >= 65536 ? 2000 : 200000;
  for (int i = 0; i < 100; i++) process_vm_readv(c, &l, 1, &r, 1, 0);
  double a = now_ns();
  for (int i = 0; i < iters; i++) if (process_vm_readv(c, &l, 1, &r, 1, 0) != (ssize_t)n) { perror("readv"); break; }
  double cma = (now_ns() - a) / iters;
  /* memcpy: this process's own buffer of the same size into dst */
  for (int i = 0; i < 100; i++) { memcpy(dst, buf, n); __asm__ volatile("" ::: "memory"); }
  a = now_ns();
  for (int i = 0; i < iters; i++) { memcpy(dst, buf, n); __asm__ volatile("" ::: "memory"); }
  double mc = (now_ns() - a) / iters;
  printf("%zu B: %.3f us per process_vm_readv (%.1f GB/s), %.3f us per memcpy (%.1f GB/s)",
         n, cma / 1e3, n / cma, mc / 1e3, n / mc);
  if (chunk > 0 && chunk < n) {
    struct iovec li[16], ri[16];
    a = now_ns();
    for (int i = 0; i < iters; i++) {
      for (size_t off = 0; off < n;) {
        int k = 0;
        size_t start = off;
        for (; k < 16 && off < n; k++) {
          size_t m = n - off < chunk ? n - off : chunk;
          li[k] = (struct iovec){dst + off, m};
          ri[k] = (struct iovec){buf + off, m};
          off += m;
        }
        if (process_vm_readv(c, li, k, ri, k, 0) != (ssize_t)(off - start)) { perror("readv"); break; }
      }
    }
    double ch = (now_ns() - a) / iters;
    printf(", %.3f us in %zu-byte iovecs (%.1f GB/s)", ch / 1e3, chunk, n / ch);
  }
  printf("\n");
  kill(c, SIGKILL);
  return 0;
}
