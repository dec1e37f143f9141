/* cma-floor.c - the cost of one process_vm_readv of N bytes from a child's touched memory
 * (mean over a loop): the floor of shm's native RMA. cc -O2 -o cma-floor bench/cma-floor.c;
 * taskset -c 1 ./cma-floor 8 */
#define _GNU_SOURCE
#include <sys/uio.h>
#include <stdio.h>
#include <unistd.h>
#include <time.h>
#include <signal.h>
#include <stdlib.h>
static char buf[1<<20];
int main(int argc, char **argv) {
  size_t n = argc > 1 ? atol(argv[1]) : 8;
  pid_t c = fork(); usleep(100000);
  if (c == 0) { for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)i; for (;;) pause(); }
  char *dst = malloc(n);
  struct iovec l = {dst, n}, r = {buf, n};
  int iters = n >= 65536 ? 2000 : 200000;
  struct timespec a, b;
  for (int i = 0; i < 1000; i++) process_vm_readv(c, &l, 1, &r, 1, 0);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < iters; i++) if (process_vm_readv(c, &l, 1, &r, 1, 0) != (ssize_t)n) { perror("readv"); break; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%zu B: %.3f us per process_vm_readv\n", n, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / iters / 1e3);
  kill(c, SIGKILL);
  return 0;
}
