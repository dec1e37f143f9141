/*
 * An MPI correctness program for xfer under Open MPI's ofi MTL
 * (ofi/tests/mpi.rs runs it with 4 ranks, `--mca pml cm --mca mtl ofi
 * --mca mtl_ofi_provider_include xfer`). It uses nothing of xfer's: plain MPI.
 *
 *   mpi_check [max_bytes [reps]]     (default 16 MiB, 1 repetition)
 *
 * Every payload is a pattern of (sender, receiver, tag, size, round) and is
 * checked byte for byte, with the status (source, tag, count) of its receive:
 *   1. a ring of directed, tagged MPI_Irecv/MPI_Isend, 0 B to max_bytes;
 *   2. rank 0 receives from every other rank with MPI_ANY_SOURCE (and then
 *      MPI_ANY_TAG), sizes 0 B to max_bytes;
 *   3. MPI_Probe, MPI_Iprobe (also with nothing pending: flag 0) and
 *      MPI_Mprobe/MPI_Mrecv with eager and rendezvous sizes (FI_PEEK, FI_CLAIM);
 *   4. all-to-all: MPI_Alltoall at several block sizes, and every rank
 *      sending to every other rank point to point at once (to 4 MiB);
 *   5. MPI_Ssend (synchronous: the ofi MTL's acknowledgement messages).
 * Rank 0 prints "mpi_check: N ranks, all checks passed" and every rank exits
 * 0 only when no rank found an error.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks, errors;
static size_t max_bytes = 16u << 20;

#define FAIL(...)                                                          \
	do {                                                               \
		fprintf(stderr, "rank %d: FAIL line %d: ", rank, __LINE__); \
		fprintf(stderr, __VA_ARGS__);                              \
		fprintf(stderr, "\n");                                     \
		errors++;                                                  \
	} while (0)

static unsigned char byte_at(size_t i, int from, int to, int tag, int round)
{
	return (unsigned char)(i * 131u + (size_t)from * 17u + (size_t)to * 29u + (size_t)tag * 7u + (size_t)round * 3u +
			       (i >> 8) * 5u);
}

static void fill(unsigned char *buf, size_t len, int from, int to, int tag, int round)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = byte_at(i, from, to, tag, round);
}

/* Checks a received payload and its status. */
static void check(const char *what, const unsigned char *buf, size_t len, MPI_Status *st, int from, int to, int tag,
		  int round)
{
	int count = -1;
	MPI_Get_count(st, MPI_BYTE, &count);
	if (st->MPI_SOURCE != from || st->MPI_TAG != tag || (size_t)count != len) {
		FAIL("%s: status source %d tag %d count %d, expected %d %d %zu", what, st->MPI_SOURCE, st->MPI_TAG,
		     count, from, tag, len);
		return;
	}
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != byte_at(i, from, to, tag, round)) {
			FAIL("%s: %zu bytes from %d tag %d: byte %zu is %u, expected %u", what, len, from, tag, i,
			     buf[i], byte_at(i, from, to, tag, round));
			return;
		}
	}
}

static unsigned char *alloc(size_t len)
{
	unsigned char *p = malloc(len ? len : 1);
	if (!p) {
		fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, len);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

/* 0 B, small, around the usual eager limits, then powers of 4 to max_bytes. */
static size_t sizes[32];
static int nsizes;

static void make_sizes(void)
{
	const size_t fixed[] = {0, 1, 7, 64, 1000, 4095, 4096, 8193, 65536 + 3};
	for (size_t k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++)
		if (fixed[k] <= max_bytes)
			sizes[nsizes++] = fixed[k];
	for (size_t s = 256u << 10; s <= max_bytes && nsizes < 31; s *= 4)
		sizes[nsizes++] = s;
	if (sizes[nsizes - 1] != max_bytes)
		sizes[nsizes++] = max_bytes;
}

/* 1. Ring: directed, tagged receives posted before the sends. */
static void ring(int round)
{
	int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
	for (int k = 0; k < nsizes; k++) {
		size_t len = sizes[k];
		unsigned char *out = alloc(len), *in = alloc(len);
		fill(out, len, rank, next, k, round);
		MPI_Request req[2];
		MPI_Status st[2];
		MPI_Irecv(in, (int)len, MPI_BYTE, prev, k, MPI_COMM_WORLD, &req[0]);
		MPI_Isend(out, (int)len, MPI_BYTE, next, k, MPI_COMM_WORLD, &req[1]);
		MPI_Waitall(2, req, st);
		check("ring", in, len, &st[0], prev, rank, k, round);
		free(out);
		free(in);
	}
}

/* 2. Any source: rank 0 takes every other rank's message in arrival order. */
static void any_source(int round)
{
	for (int k = 0; k < nsizes; k++) {
		size_t len = sizes[k];
		int tag = 1000 + k;
		unsigned char *buf = alloc(len);
		if (rank == 0) {
			int seen = 0;
			for (int m = 1; m < nranks; m++) {
				MPI_Status st;
				/* Alternate MPI_ANY_TAG and a given tag. */
				int want = (m % 2) ? MPI_ANY_TAG : tag;
				MPI_Recv(buf, (int)len, MPI_BYTE, MPI_ANY_SOURCE, want, MPI_COMM_WORLD, &st);
				if (st.MPI_SOURCE < 1 || st.MPI_SOURCE >= nranks || (seen & (1 << st.MPI_SOURCE))) {
					FAIL("any-source: source %d", st.MPI_SOURCE);
					continue;
				}
				seen |= 1 << st.MPI_SOURCE;
				check("any-source", buf, len, &st, st.MPI_SOURCE, 0, tag, round);
			}
		} else {
			fill(buf, len, rank, 0, tag, round);
			MPI_Send(buf, (int)len, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
		}
		free(buf);
		MPI_Barrier(MPI_COMM_WORLD);
	}
}

/* The size rank `r` sends in the probe tests: eager and rendezvous ones. */
static size_t probe_len(int r, int phase)
{
	size_t big = max_bytes < (1u << 20) ? max_bytes : (1u << 20);
	size_t lens[] = {0, 100, 5000, big};
	return lens[(size_t)(r + phase) % 4];
}

/* 3. MPI_Probe, MPI_Iprobe, MPI_Mprobe/MPI_Mrecv (FI_PEEK, FI_CLAIM). */
static void probes(int round)
{
	for (int phase = 0; phase < 3; phase++) {
		int tag_base = 2000 + 100 * phase;
		if (rank != 0) {
			size_t len = probe_len(rank, phase);
			unsigned char *buf = alloc(len);
			fill(buf, len, rank, 0, tag_base + rank, round);
			MPI_Send(buf, (int)len, MPI_BYTE, 0, tag_base + rank, MPI_COMM_WORLD);
			free(buf);
		} else {
			for (int m = 1; m < nranks; m++) {
				MPI_Status st;
				MPI_Message msg = MPI_MESSAGE_NULL;
				if (phase == 0) {
					MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
				} else if (phase == 1) {
					int flag = 0;
					while (!flag)
						MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
				} else {
					MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
				}
				int src = st.MPI_SOURCE, count = -1;
				MPI_Get_count(&st, MPI_BYTE, &count);
				if (src < 1 || src >= nranks || st.MPI_TAG != tag_base + src ||
				    (size_t)count != probe_len(src, phase)) {
					FAIL("probe phase %d: source %d tag %d count %d", phase, src, st.MPI_TAG, count);
					MPI_Abort(MPI_COMM_WORLD, 1);
				}
				unsigned char *buf = alloc((size_t)count);
				MPI_Status rst;
				if (phase == 2)
					MPI_Mrecv(buf, count, MPI_BYTE, &msg, &rst);
				else
					MPI_Recv(buf, count, MPI_BYTE, src, st.MPI_TAG, MPI_COMM_WORLD, &rst);
				check("probe", buf, (size_t)count, &rst, src, 0, tag_base + src, round);
				free(buf);
			}
			/* Everything was received: a probe finds nothing now. */
			int flag = 1;
			MPI_Status st;
			MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
			if (flag)
				FAIL("MPI_Iprobe found a message from %d tag %d after all were received", st.MPI_SOURCE,
				     st.MPI_TAG);
			MPI_Message none;
			MPI_Improbe(1, tag_base, MPI_COMM_WORLD, &flag, &none, &st);
			if (flag)
				FAIL("MPI_Improbe found a message that was never sent");
		}
		MPI_Barrier(MPI_COMM_WORLD);
	}
}

/* 4. All-to-all: MPI_Alltoall, then every pair at once point to point. */
static void all_to_all(int round)
{
	const size_t blocks[] = {1, 100, 4096, 65536, 1u << 20};
	for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
		size_t len = blocks[b];
		if (len * (size_t)nranks > max_bytes && len > 1)
			break;
		unsigned char *out = alloc(len * (size_t)nranks), *in = alloc(len * (size_t)nranks);
		for (int r = 0; r < nranks; r++)
			fill(out + (size_t)r * len, len, rank, r, (int)b, round);
		MPI_Alltoall(out, (int)len, MPI_BYTE, in, (int)len, MPI_BYTE, MPI_COMM_WORLD);
		for (int r = 0; r < nranks; r++) {
			MPI_Status st = {.MPI_SOURCE = r, .MPI_TAG = (int)b};
			MPI_Status_set_elements(&st, MPI_BYTE, (int)len);
			check("MPI_Alltoall", in + (size_t)r * len, len, &st, r, rank, (int)b, round);
		}
		free(out);
		free(in);
	}
	for (int k = 0; k < nsizes; k++) {
		size_t len = sizes[k];
		if (len > (4u << 20))
			break; /* every rank sends to and receives from all at once */
		int tag = 3000 + k;
		unsigned char **out = calloc((size_t)nranks, sizeof(*out)), **in = calloc((size_t)nranks, sizeof(*in));
		MPI_Request *req = calloc(2 * (size_t)nranks, sizeof(*req));
		MPI_Status *st = calloc(2 * (size_t)nranks, sizeof(*st));
		int n = 0;
		for (int r = 0; r < nranks; r++) {
			if (r == rank)
				continue;
			in[r] = alloc(len);
			MPI_Irecv(in[r], (int)len, MPI_BYTE, r, tag, MPI_COMM_WORLD, &req[n++]);
		}
		for (int r = 0; r < nranks; r++) {
			if (r == rank)
				continue;
			out[r] = alloc(len);
			fill(out[r], len, rank, r, tag, round);
			MPI_Isend(out[r], (int)len, MPI_BYTE, r, tag, MPI_COMM_WORLD, &req[n++]);
		}
		MPI_Waitall(n, req, st);
		for (int r = 0, i = 0; r < nranks; r++) {
			if (r == rank)
				continue;
			check("pairwise", in[r], len, &st[i++], r, rank, tag, round);
			free(in[r]);
			free(out[r]);
		}
		free(in);
		free(out);
		free(req);
		free(st);
	}
}

/* 5. Synchronous sends around the ring. */
static void synchronous(int round)
{
	int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
	size_t len = max_bytes < 4096 ? max_bytes : 4096;
	unsigned char *out = alloc(len), *in = alloc(len);
	fill(out, len, rank, next, 4000, round);
	MPI_Request req;
	MPI_Status st;
	MPI_Irecv(in, (int)len, MPI_BYTE, prev, 4000, MPI_COMM_WORLD, &req);
	MPI_Ssend(out, (int)len, MPI_BYTE, next, 4000, MPI_COMM_WORLD);
	MPI_Wait(&req, &st);
	check("MPI_Ssend", in, len, &st, prev, rank, 4000, round);
	free(out);
	free(in);
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (argc > 1)
		max_bytes = strtoull(argv[1], NULL, 0);
	int reps = argc > 2 ? atoi(argv[2]) : 1;
	if (nranks < 2 || nranks > 30 || max_bytes < 64 || max_bytes > (1u << 30) || reps < 1) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -np N (2..30) mpi_check [max_bytes >= 64 [reps]]\n");
		MPI_Finalize();
		return 2;
	}
	make_sizes();
	for (int round = 0; round < reps; round++) {
		ring(round);
		any_source(round);
		probes(round);
		all_to_all(round);
		synchronous(round);
	}
	int total = 0;
	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		if (total == 0)
			printf("mpi_check: %d ranks, all checks passed (sizes 0 to %zu bytes, %d round(s))\n", nranks,
			       max_bytes, reps);
		else
			printf("mpi_check: %d error(s)\n", total);
		fflush(stdout);
	}
	MPI_Finalize();
	return total ? 1 : 0;
}
