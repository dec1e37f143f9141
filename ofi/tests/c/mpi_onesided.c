/* MPI one-sided communication, every result checked, on any number of
 * ranks (the tests run 4): a window of SLOTS 64-bit slots, an int and a
 * double per rank (MPI_Win_create over MPI_Alloc_mem), then
 * - MPI_Put (fence epochs): each rank writes to its slot of every rank;
 * - MPI_Get: each rank reads another's slot of every rank;
 * - MPI_Accumulate: MPI_SUM of 64-bit ints and of ints, MPI_MAX of
 *   doubles, from every rank into every rank;
 * - MPI_Fetch_and_op (passive target, lock_all and flush): ITERS
 *   fetch-and-adds of 1 by every rank on rank 0's counter; the values
 *   fetched are each rank's increasing and, gathered, exactly 0 to
 *   ranks x ITERS - 1 (no two fetched the same: the adds were atomic);
 *   MPI_NO_OP reads it back; MPI_REPLACE swaps;
 * - MPI_Compare_and_swap: every rank but 0 tries to take rank 0's free
 *   lock (-1 -> its rank): exactly one wins, the others fetch the winner;
 *   a compare that does not match changes nothing.
 * Prints "mpi_onesided: N ranks, all checks passed" on rank 0, exits 0. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 64
#define ITERS 200

/* The slots of the 64-bit window. */
enum { PUT = 0, GOT = SLOTS / 4, SUM = SLOTS / 2, COUNTER, LOCK, SWAP };

#define CHECK(cond, ...)                                                          \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "rank %d: CHECK %s:%d: %s: ", me, __FILE__, \
				__LINE__, #cond);                                 \
			fprintf(stderr, __VA_ARGS__);                             \
			fprintf(stderr, "\n");                                    \
			MPI_Abort(MPI_COMM_WORLD, 1);                             \
		}                                                                 \
	} while (0)

static int me, n;

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Slot `slot` of rank `t` as an atomic read sees it (passive target). */
static int64_t read_slot(MPI_Win win, int t, int slot)
{
	int64_t v = -7;
	MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
	MPI_Fetch_and_op(NULL, &v, MPI_INT64_T, t, slot, MPI_NO_OP, win);
	MPI_Win_unlock(t, win);
	return v;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n > GOT - PUT) {
		fprintf(stderr, "at most %d ranks\n", GOT - PUT);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	int64_t *w;
	int *wi;
	double *wd;
	MPI_Win win, win_i, win_d;
	/* MPI_Alloc_mem and MPI_Win_create, not MPI_Win_allocate: Open MPI
	 * 4.1's osc rdma maps an MPI_Win_allocate window of ranks on one node
	 * into shared memory and then hands btl ofi's compare-and-swap a null
	 * registration handle for those peers (a crash in mca_btl_ofi_acswap,
	 * whatever the provider). */
	MPI_Alloc_mem(SLOTS * sizeof(int64_t), MPI_INFO_NULL, &w);
	MPI_Alloc_mem(sizeof(int), MPI_INFO_NULL, &wi);
	MPI_Alloc_mem(sizeof(double), MPI_INFO_NULL, &wd);
	MPI_Win_create(w, SLOTS * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
	MPI_Win_create(wi, sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win_i);
	MPI_Win_create(wd, sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &win_d);
	for (int i = 0; i < SLOTS; i++)
		w[i] = 0;
	w[LOCK] = -1;
	*wi = 0;
	*wd = -1e300;
	MPI_Barrier(MPI_COMM_WORLD);

	/* MPI_Put: my slot of every rank gets me * 1000 + target. */
	int64_t put[GOT];
	MPI_Win_fence(0, win);
	for (int t = 0; t < n; t++) {
		put[t] = (int64_t)me * 1000 + t;
		MPI_Put(&put[t], 1, MPI_INT64_T, t, PUT + me, 1, MPI_INT64_T, win);
	}
	MPI_Win_fence(0, win);
	for (int r = 0; r < n; r++)
		CHECK(w[PUT + r] == (int64_t)r * 1000 + me, "put slot %d = %lld", r, (long long)w[PUT + r]);

	/* MPI_Get: from every rank, the slot the next rank put there. */
	int64_t got[GOT];
	int next = (me + 1) % n;
	for (int t = 0; t < n; t++)
		MPI_Get(&got[t], 1, MPI_INT64_T, t, PUT + next, 1, MPI_INT64_T, win);
	MPI_Win_fence(0, win);
	for (int t = 0; t < n; t++)
		CHECK(got[t] == (int64_t)next * 1000 + t, "get from %d = %lld", t, (long long)got[t]);

	/* MPI_Accumulate: sums and a maximum from every rank. */
	MPI_Win_fence(0, win_i);
	MPI_Win_fence(0, win_d);
	int64_t mine = me + 1;
	int mine_i = 3 * (me + 1);
	double mine_d = 0.5 + me;
	for (int t = 0; t < n; t++) {
		MPI_Accumulate(&mine, 1, MPI_INT64_T, t, SUM, 1, MPI_INT64_T, MPI_SUM, win);
		MPI_Accumulate(&mine_i, 1, MPI_INT, t, 0, 1, MPI_INT, MPI_SUM, win_i);
		MPI_Accumulate(&mine_d, 1, MPI_DOUBLE, t, 0, 1, MPI_DOUBLE, MPI_MAX, win_d);
	}
	MPI_Win_fence(0, win);
	MPI_Win_fence(0, win_i);
	MPI_Win_fence(0, win_d);
	int64_t tri = (int64_t)n * (n + 1) / 2;
	CHECK(w[SUM] == tri, "accumulated %lld, want %lld", (long long)w[SUM], (long long)tri);
	CHECK(*wi == 3 * tri, "accumulated int %d", *wi);
	CHECK(*wd == 0.5 + (n - 1), "max %g", *wd);
	MPI_Barrier(MPI_COMM_WORLD);

	/* MPI_Fetch_and_op: fetch-and-add on rank 0's counter. */
	int64_t one = 1, fetched[ITERS], *all = malloc(sizeof(int64_t) * ITERS * n);
	CHECK(all != NULL, "malloc");
	MPI_Win_lock_all(0, win);
	for (int i = 0; i < ITERS; i++) {
		MPI_Fetch_and_op(&one, &fetched[i], MPI_INT64_T, 0, COUNTER, MPI_SUM, win);
		MPI_Win_flush(0, win);
		CHECK(i == 0 || fetched[i] > fetched[i - 1], "fetched %lld after %lld", (long long)fetched[i],
		      (long long)fetched[i - 1]);
	}
	MPI_Win_unlock_all(win);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Gather(fetched, ITERS, MPI_INT64_T, all, ITERS, MPI_INT64_T, 0, MPI_COMM_WORLD);
	if (me == 0) {
		qsort(all, (size_t)ITERS * n, sizeof(int64_t), cmp_i64);
		for (int64_t i = 0; i < (int64_t)ITERS * n; i++)
			CHECK(all[i] == i, "fetched values: %lld at %lld", (long long)all[i], (long long)i);
	}
	free(all);
	int64_t now = read_slot(win, 0, COUNTER), swapped = -1, with = 1000 + me;
	CHECK(now == (int64_t)ITERS * n, "counter %lld", (long long)now);
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == n - 1) {
		MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
		MPI_Fetch_and_op(&with, &swapped, MPI_INT64_T, 0, COUNTER, MPI_REPLACE, win);
		MPI_Win_unlock(0, win);
		CHECK(swapped == (int64_t)ITERS * n, "swap fetched %lld", (long long)swapped);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	now = read_slot(win, 0, COUNTER);
	CHECK(now == 1000 + n - 1, "swapped in %lld", (long long)now);

	/* MPI_Compare_and_swap: one rank takes the lock. Rank 0, which holds
	 * it, does not: Open MPI 4.1's osc rdma hands btl ofi a null
	 * registration handle for a compare-and-swap on the rank's own window
	 * (a crash in mca_btl_ofi_acswap, whatever the provider). */
	int64_t free_lock = -1, old = -2, mine_rank = me;
	if (me != 0) {
		MPI_Win_lock_all(0, win);
		MPI_Compare_and_swap(&mine_rank, &free_lock, &old, MPI_INT64_T, 0, LOCK, win);
		MPI_Win_flush(0, win);
		MPI_Win_unlock_all(win);
	}
	int won = old == -1, winners = 0;
	MPI_Allreduce(&won, &winners, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	CHECK(winners == (n > 1), "%d ranks took the lock", winners);
	int64_t holder = won || me == 0 ? -1 : old, first = -1;
	if (won)
		holder = me;
	MPI_Allreduce(&holder, &first, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
	holder = first;
	CHECK(n == 1 || (holder > 0 && holder < n), "lock fetched %lld", (long long)old);
	CHECK(me == 0 || won || old == holder, "rank %d fetched %lld, holder %lld", me, (long long)old,
	      (long long)holder);
	MPI_Barrier(MPI_COMM_WORLD);
	/* A compare that does not match: nothing changes, the holder fetched. */
	int64_t wrong = holder + 1, taken = holder;
	if (me != 0) {
		MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
		MPI_Compare_and_swap(&mine_rank, &wrong, &taken, MPI_INT64_T, 0, LOCK, win);
		MPI_Win_unlock(0, win);
	}
	CHECK(taken == holder, "failed cswap fetched %lld", (long long)taken);
	MPI_Barrier(MPI_COMM_WORLD);
	now = read_slot(win, 0, LOCK);
	CHECK(now == holder, "lock %lld after a failed cswap", (long long)now);

	MPI_Win_free(&win_d);
	MPI_Win_free(&win_i);
	MPI_Win_free(&win);
	MPI_Free_mem(wd);
	MPI_Free_mem(wi);
	MPI_Free_mem(w);
	if (me == 0)
		printf("mpi_onesided: %d ranks, all checks passed\n", n);
	MPI_Finalize();
	return 0;
}
