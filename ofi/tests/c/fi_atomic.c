/* Remote atomics (FI_ATOMIC), checked the same way over any provider that
 * offers them (FI_PROVIDER selects it; the tests run it over xfer's shm and
 * tcp domains). One process, endpoint A (initiator, with a write and a
 * read counter) and B (target, whose region holds the elements), both
 * driven while waiting (progress is manual):
 * - over xfer, FI_ORDER_ATOMIC_* in msg_order (none on a verbs domain in
 *   the device atomic mode) and honoured when asked for;
 * - fi_query_atomic and fi_atomicvalid / fi_fetch_atomicvalid /
 *   fi_compare_atomicvalid: a count (1 for xfer) and the element's size for what the
 *   provider applies, -FI_EOPNOTSUPP for a bitwise operation on a float,
 *   FI_ATOMIC_READ without a fetch, FI_CSWAP without a compare (and, over
 *   xfer, an 8-bit type and FI_PROD);
 * - for every datatype (int32, uint32, int64, uint64, float, double) and
 *   every operation valid on it (min, max, sum, bor, band, bxor, write):
 *   fi_atomic, fi_atomicv, fi_atomicmsg, fi_fetch_atomic,
 *   fi_fetch_atomicv, fi_fetch_atomicmsg and fi_inject_atomic each leave
 *   the element as computed here, the fetching ones bring back the old
 *   value; one completion each (FI_ATOMIC | FI_WRITE, FI_ATOMIC | FI_READ,
 *   none for an inject) with its context; a non-fetching one at the default
 *   completion level may complete before the target applied it (its
 *   element is awaited, driving both), fi_atomicmsg with
 *   FI_DELIVERY_COMPLETE only after (checked at once); FI_ATOMIC_READ fetches without
 *   changing; fi_compare_atomic (and its v and msg forms) swaps when equal
 *   and not otherwise, bringing back the old value either way;
 * - the write and read counters count every atomic of their kind;
 * - refused at the target, memory and result left alone, FI_EACCES at A: a
 *   bad key, an element past the region's end, a misaligned element (the
 *   non-fetching one with FI_DELIVERY_COMPLETE); over xfer, fi_atomic with a
 *   bad key at the default level completes, changes nothing, and a fetch
 *   behind it still works;
 *   refused at the call over xfer: two elements (-FI_EINVAL; xfer's count
 *   is 1), a bitwise operation on a float (-FI_EOPNOTSUPP).
 * Written against libfabric's API only: over libfabric's own tcp provider
 * every operation, fetch, completion and counter check passes as well (it
 * then reports an extra completion after the refusals).
 * Prints "all atomics checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "must.h"
#include "drive.h"
#include "rma_pair.h"

/* An element of any datatype. */
union elem {
	int32_t i32;
	uint32_t u32;
	int64_t i64;
	uint64_t u64;
	float f;
	double d;
	char bytes[8];
};

static const enum fi_datatype TYPES[] = {FI_INT32, FI_UINT32, FI_INT64, FI_UINT64, FI_FLOAT, FI_DOUBLE};
static const enum fi_op OPS[] = {FI_MIN, FI_MAX, FI_SUM, FI_BOR, FI_BAND, FI_BXOR, FI_ATOMIC_WRITE};

static size_t size_of(enum fi_datatype dt)
{
	return dt == FI_INT32 || dt == FI_UINT32 || dt == FI_FLOAT ? 4 : 8;
}

static int is_float(enum fi_datatype dt)
{
	return dt == FI_FLOAT || dt == FI_DOUBLE;
}

static int bitwise(enum fi_op op)
{
	return op == FI_BOR || op == FI_BAND || op == FI_BXOR;
}

/* `v` as an element of `dt` (a float from its integer value). */
static union elem of(enum fi_datatype dt, int64_t v)
{
	union elem e;
	memset(&e, 0, sizeof(e));
	switch (dt) {
	case FI_INT32: e.i32 = (int32_t)v; break;
	case FI_UINT32: e.u32 = (uint32_t)v; break;
	case FI_INT64: e.i64 = v; break;
	case FI_UINT64: e.u64 = (uint64_t)v; break;
	case FI_FLOAT: e.f = (float)v + 0.5f; break;
	default: e.d = (double)v + 0.25; break;
	}
	return e;
}

#define INT_OP(F)                                                             \
	switch (op) {                                                         \
	case FI_MIN: r.F = a.F < b.F ? a.F : b.F; break;                      \
	case FI_MAX: r.F = a.F > b.F ? a.F : b.F; break;                      \
	case FI_SUM: r.F = a.F + b.F; break;                                  \
	case FI_BOR: r.F = a.F | b.F; break;                                  \
	case FI_BAND: r.F = a.F & b.F; break;                                 \
	case FI_BXOR: r.F = a.F ^ b.F; break;                                 \
	default: r.F = b.F; break;                                            \
	}
#define FLOAT_OP(F)                                                           \
	switch (op) {                                                         \
	case FI_MIN: r.F = a.F < b.F ? a.F : b.F; break;                      \
	case FI_MAX: r.F = a.F > b.F ? a.F : b.F; break;                      \
	case FI_SUM: r.F = a.F + b.F; break;                                  \
	default: r.F = b.F; break;                                            \
	}

/* What `op` makes of element `a` with operand `b`. */
static union elem apply(enum fi_op op, enum fi_datatype dt, union elem a, union elem b)
{
	union elem r;
	memset(&r, 0, sizeof(r));
	switch (dt) {
	case FI_INT32: INT_OP(i32); break;
	case FI_UINT32: INT_OP(u32); break;
	case FI_INT64: INT_OP(i64); break;
	case FI_UINT64: INT_OP(u64); break;
	case FI_FLOAT: FLOAT_OP(f); break;
	default: FLOAT_OP(d); break;
	}
	return r;
}

static int same(enum fi_datatype dt, const void *a, const void *b)
{
	return !memcmp(a, b, size_of(dt));
}

static struct pair p;
/* B's region: elements at its start; A's: operands and results. */
static char target[64], local[64];
static uint64_t writes, reads;
/* Over xfer: what xfer refuses that other providers apply is checked too. */
static int xfer;

/* Reads A's next completion: it must be an atomic's success with `ctx`
 * and `flags`. */
static void completed(void *ctx, uint64_t flags, const char *what)
{
	struct fi_cq_data_entry e;
	one(cq_a, cq_b, &e);
	CHECK(e.op_context == ctx && (e.flags & (FI_ATOMIC | FI_READ | FI_WRITE)) == flags, "%s: context %p flags %#llx",
	      what, e.op_context, (unsigned long long)e.flags);
}

/* Reads A's next completion: it must be an error FI_EACCES with `ctx`. */
static void refused(void *ctx, const char *what)
{
	struct fi_cq_data_entry e;
	struct fi_cq_err_entry err;
	CHECK(next_completion(cq_a, cq_b, &e, &err) == 1, "%s completed", what);
	/* (libfabric's tcp loses the context of some: checked over xfer) */
	CHECK((err.op_context == ctx || !xfer) && err.err == FI_EACCES, "%s: error %d (%s) context %p", what, err.err,
	      fi_strerror(err.err), err.op_context);
}

/* Whether A's CQ stays empty while driven a while. */
static int a_quiet(void)
{
	struct fi_cq_data_entry e;
	for (int i = 0; i < 100; i++) {
		(void)fi_cq_read(cq_b, NULL, 0);
		if (fi_cq_read(cq_a, &e, 1) != -FI_EAGAIN)
			return 0;
	}
	return 1;
}

/* Every way of applying `op` to `dt` without a compare: the element starts
 * at `v0`, the operand is `x`. */
static void check_op(enum fi_datatype dt, enum fi_op op, union elem v0, union elem x)
{
	static int ctx;
	size_t n = size_of(dt);
	union elem want = apply(op, dt, v0, x), *res = (union elem *)(local + 16);
	char *elem = target + 8;
	uint64_t at = p.base + 8;
	struct fi_ioc iov = {.addr = &x, .count = 1}, rv = {.addr = res, .count = 1};
	struct fi_rma_ioc rma = {.addr = at, .count = 1, .key = p.key};
	struct fi_msg_atomic msg = {.msg_iov = &iov, .iov_count = 1, .addr = p.b, .rma_iov = &rma, .rma_iov_count = 1,
				    .datatype = dt, .op = op, .context = &ctx};
	for (int way = 0; way < 7; way++) {
		int fetch = way >= 3 && way < 6;
		memcpy(elem, &v0, n);
		memset(res, 0x5a, 8);
		switch (way) {
		case 0: POST(fi_atomic(p.ep_a, &x, 1, NULL, p.b, at, p.key, dt, op, &ctx)); break;
		case 1: POST(fi_atomicv(p.ep_a, &iov, NULL, 1, p.b, at, p.key, dt, op, &ctx)); break;
		case 2: POST(fi_atomicmsg(p.ep_a, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE)); break;
		case 3: POST(fi_fetch_atomic(p.ep_a, &x, 1, NULL, res, NULL, p.b, at, p.key, dt, op, &ctx)); break;
		case 4: POST(fi_fetch_atomicv(p.ep_a, &iov, NULL, 1, &rv, NULL, 1, p.b, at, p.key, dt, op, &ctx)); break;
		case 5: POST(fi_fetch_atomicmsg(p.ep_a, &msg, &rv, NULL, 1, FI_COMPLETION)); break;
		default: POST(fi_inject_atomic(p.ep_a, &x, 1, p.b, at, p.key, dt, op)); break;
		}
		if (way == 6) {
			/* No completion: the element changes, the write counter
			 * counts it, A's CQ stays empty. */
			writes++;
			double end = now() + WAIT_SEC;
			while (fi_cntr_read(p.k[0]) < writes) {
				(void)fi_cq_read(cq_a, NULL, 0);
				(void)fi_cq_read(cq_b, NULL, 0);
				CHECK(now() < end, "inject dt %d op %d: not counted", dt, op);
			}
			CHECK(a_quiet(), "inject dt %d op %d: a completion", dt, op);
		} else {
			completed(&ctx, FI_ATOMIC | (fetch ? FI_READ : FI_WRITE), "atomic");
			*(fetch ? &reads : &writes) += 1;
		}
		if (way < 2 || way == 6) {
			/* The default level: applied by the target later. */
			double end = now() + WAIT_SEC;
			while (!same(dt, elem, &want) && now() < end) {
				(void)fi_cq_read(cq_a, NULL, 0);
				(void)fi_cq_read(cq_b, NULL, 0);
			}
		}
		CHECK(same(dt, elem, &want), "dt %d op %d way %d: element %#llx, want %#llx", dt, op, way,
		      (unsigned long long)((union elem *)elem)->u64, (unsigned long long)want.u64);
		if (fetch)
			CHECK(same(dt, res, &v0), "dt %d op %d way %d: fetched %#llx, want %#llx", dt, op, way,
			      (unsigned long long)res->u64, (unsigned long long)v0.u64);
	}
}

/* FI_ATOMIC_READ and FI_CSWAP on `dt`. */
static void check_read_and_cswap(enum fi_datatype dt, union elem v0, union elem x)
{
	static int ctx;
	size_t n = size_of(dt);
	union elem *res = (union elem *)(local + 16), other = x;
	char *elem = target + 8;
	uint64_t at = p.base + 8;
	memcpy(elem, &v0, n);
	memset(res, 0, 8);
	POST(fi_fetch_atomic(p.ep_a, NULL, 1, NULL, res, NULL, p.b, at, p.key, dt, FI_ATOMIC_READ, &ctx));
	completed(&ctx, FI_ATOMIC | FI_READ, "atomic read");
	reads++;
	CHECK(same(dt, res, &v0) && same(dt, elem, &v0), "dt %d: read", dt);

	struct fi_ioc iov = {.addr = &x, .count = 1}, rv = {.addr = res, .count = 1};
	for (int way = 0; way < 3; way++)
		for (int equal = 0; equal < 2; equal++) {
			union elem cmp = equal ? v0 : other;
			struct fi_ioc cv = {.addr = &cmp, .count = 1};
			struct fi_rma_ioc rma = {.addr = at, .count = 1, .key = p.key};
			struct fi_msg_atomic msg = {.msg_iov = &iov, .iov_count = 1, .addr = p.b, .rma_iov = &rma,
						    .rma_iov_count = 1, .datatype = dt, .op = FI_CSWAP, .context = &ctx};
			memcpy(elem, &v0, n);
			memset(res, 0, 8);
			switch (way) {
			case 0:
				POST(fi_compare_atomic(p.ep_a, &x, 1, NULL, &cmp, NULL, res, NULL, p.b, at, p.key, dt,
						       FI_CSWAP, &ctx));
				break;
			case 1:
				POST(fi_compare_atomicv(p.ep_a, &iov, NULL, 1, &cv, NULL, 1, &rv, NULL, 1, p.b, at, p.key,
							dt, FI_CSWAP, &ctx));
				break;
			default: POST(fi_compare_atomicmsg(p.ep_a, &msg, &cv, NULL, 1, &rv, NULL, 1, 0)); break;
			}
			completed(&ctx, FI_ATOMIC | FI_READ, "compare atomic");
			reads++;
			CHECK(same(dt, res, &v0), "dt %d cswap way %d: fetched", dt, way);
			CHECK(same(dt, elem, equal ? &x : &v0), "dt %d cswap way %d equal %d: element", dt, way, equal);
		}
}

/* What the provider says it applies. */
static void check_queries(void)
{
	struct fi_atomic_attr attr;
	size_t count = 0;
	for (size_t t = 0; t < sizeof(TYPES) / sizeof(TYPES[0]); t++) {
		enum fi_datatype dt = TYPES[t];
		for (size_t o = 0; o < sizeof(OPS) / sizeof(OPS[0]); o++) {
			enum fi_op op = OPS[o];
			int want = is_float(dt) && bitwise(op) ? -FI_EOPNOTSUPP : 0;
			memset(&attr, 0, sizeof(attr));
			CHECK(fi_query_atomic(p.domain, dt, op, &attr, 0) == want, "query dt %d op %d", dt, op);
			CHECK(want || (attr.count >= 1 && attr.size == size_of(dt)), "query dt %d op %d: %zu x %zu", dt, op,
			      attr.count, attr.size);
			CHECK(fi_query_atomic(p.domain, dt, op, &attr, FI_FETCH_ATOMIC) == want, "fetch query");
			CHECK(fi_atomicvalid(p.ep_a, dt, op, &count) == want && (want || count >= 1), "atomicvalid");
			CHECK(fi_fetch_atomicvalid(p.ep_a, dt, op, &count) == want, "fetch_atomicvalid");
			CHECK(fi_compare_atomicvalid(p.ep_a, dt, op, &count) == -FI_EOPNOTSUPP, "compare_atomicvalid");
		}
		CHECK(fi_query_atomic(p.domain, dt, FI_CSWAP, &attr, FI_COMPARE_ATOMIC) == 0 && attr.size == size_of(dt),
		      "cswap query");
		CHECK(fi_compare_atomicvalid(p.ep_a, dt, FI_CSWAP, &count) == 0 && count >= 1, "cswap valid");
		CHECK(fi_atomicvalid(p.ep_a, dt, FI_CSWAP, &count) == -FI_EOPNOTSUPP, "cswap without compare");
		CHECK(fi_atomicvalid(p.ep_a, dt, FI_ATOMIC_READ, &count) == -FI_EOPNOTSUPP, "read without fetch");
		CHECK(fi_fetch_atomicvalid(p.ep_a, dt, FI_ATOMIC_READ, &count) == 0, "read with fetch");
	}
	if (xfer) {
		CHECK(fi_query_atomic(p.domain, FI_INT8, FI_SUM, &attr, 0) == -FI_EOPNOTSUPP, "8-bit");
		CHECK(fi_query_atomic(p.domain, FI_INT64, FI_PROD, &attr, 0) == -FI_EOPNOTSUPP, "FI_PROD");
		CHECK(fi_atomicvalid(p.ep_a, FI_UINT64, FI_SUM, &count) == 0 && count == 1, "one element");
	}
	printf("queries checked\n");
}

/* What the target refuses leaves memory and result alone. */
static void check_refusals(void)
{
	static int ctx;
	uint64_t x = 5, *res = (uint64_t *)(local + 16), *elem = (uint64_t *)(target + 8);
	*elem = 77;
	*res = 3;
	POST(fi_fetch_atomic(p.ep_a, &x, 1, NULL, res, NULL, p.b, p.base + 8, p.key + 1000, FI_UINT64, FI_SUM, &ctx));
	refused(&ctx, "bad key");
	POST(fi_fetch_atomic(p.ep_a, &x, 1, NULL, res, NULL, p.b, p.base + sizeof(target), p.key, FI_UINT64, FI_SUM,
			     &ctx));
	refused(&ctx, "past the end");
	struct fi_ioc iov = {.addr = &x, .count = 1};
	struct fi_rma_ioc rma = {.addr = p.base + 9, .count = 1, .key = p.key};
	struct fi_msg_atomic msg = {.msg_iov = &iov, .iov_count = 1, .addr = p.b, .rma_iov = &rma, .rma_iov_count = 1,
				    .datatype = FI_UINT64, .op = FI_SUM, .context = &ctx};
	POST(fi_atomicmsg(p.ep_a, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE));
	refused(&ctx, "misaligned");
	CHECK(*elem == 77 && *res == 3, "refused atomics changed memory: %llu %llu", (unsigned long long)*elem,
	      (unsigned long long)*res);
	reads += 2;
	writes += 1;
	if (xfer) {
		/* The default level: completed when sent, the refusal only
		 * counted and logged at A; a fetch behind it is answered. */
		POST(fi_atomic(p.ep_a, &x, 1, NULL, p.b, p.base + 8, p.key + 1000, FI_UINT64, FI_SUM, &ctx));
		completed(&ctx, FI_ATOMIC | FI_WRITE, "a bad key at the default level");
		POST(fi_fetch_atomic(p.ep_a, NULL, 1, NULL, res, NULL, p.b, p.base + 8, p.key, FI_UINT64, FI_ATOMIC_READ,
				     &ctx));
		completed(&ctx, FI_ATOMIC | FI_READ, "a read behind the refused atomic");
		CHECK(*res == 77, "read %llu", (unsigned long long)*res);
		*res = 3;
		reads += 1;
		writes += 1;
	}
	if (xfer) /* one element per atomic; others take more */
		CHECK(fi_atomic(p.ep_a, &x, 2, NULL, p.b, p.base + 8, p.key, FI_UINT64, FI_SUM, &ctx) == -FI_EINVAL,
		      "two elements");
	double d = 1;
	if (xfer) /* (libfabric's tcp takes it, then fails it) */
		CHECK(fi_atomic(p.ep_a, &d, 1, NULL, p.b, p.base + 8, p.key, FI_DOUBLE, FI_BOR, &ctx) == -FI_EOPNOTSUPP,
		      "bitwise on a double");
	CHECK(a_quiet(), "refused calls completed");
	CHECK(*elem == 77, "refused calls changed memory: %llu", (unsigned long long)*elem);
	printf("refusals checked\n");
}

/* Over xfer: FI_ORDER_ATOMIC_{RAR,RAW,WAR,WAW} in msg_order where the
 * target's engine applies the atomics, and a hint asking for them
 * honoured; neither on a verbs domain whose device does them
 * (XFER_ATOMIC_MODE=device), where such a hint finds no fi_info. */
static void check_order(void)
{
	const uint64_t order = FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR | FI_ORDER_ATOMIC_WAW;
	const char *mode = getenv("XFER_ATOMIC_MODE");
	int device = mode && !strcmp(mode, "device") && strstr(p.info->domain_attr->name, "verbs");
	uint64_t got = p.info->tx_attr->msg_order & order;
	CHECK(got == (device ? 0 : order), "tx msg_order %#llx", (unsigned long long)p.info->tx_attr->msg_order);
	CHECK((p.info->rx_attr->msg_order & order) == got, "rx msg_order %#llx",
	      (unsigned long long)p.info->rx_attr->msg_order);
	struct fi_info *h = fi_dupinfo(p.info), *info = NULL;
	CHECK(h != NULL, "fi_dupinfo");
	h->tx_attr->msg_order = FI_ORDER_SAS | order;
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
	CHECK(device ? ret == -FI_ENODATA : ret == 0 && (info->tx_attr->msg_order & order) == order,
	      "fi_getinfo asking for atomic ordering: %d", ret);
	fi_freeinfo(info);
	fi_freeinfo(h);
	printf("atomic ordering %s\n", device ? "not offered (device atomics)" : "offered");
}

int main(void)
{
	static const uint64_t on_a[2] = {FI_WRITE, FI_READ}, none[2] = {0, 0};
	pair_open(&p, FI_MSG | FI_ATOMIC | FI_READ | FI_WRITE, local, sizeof(local), target, sizeof(target), on_a,
		  none);
	xfer = !strcmp(p.info->fabric_attr->prov_name, "xfer");
	check_queries();
	if (xfer)
		check_order();
	for (size_t t = 0; t < sizeof(TYPES) / sizeof(TYPES[0]); t++) {
		enum fi_datatype dt = TYPES[t];
		/* Negative against positive, distinct bit patterns. */
		union elem v0 = of(dt, -300), x = of(dt, 0x1234);
		for (size_t o = 0; o < sizeof(OPS) / sizeof(OPS[0]); o++)
			if (!(is_float(dt) && bitwise(OPS[o])))
				check_op(dt, OPS[o], v0, x);
		check_read_and_cswap(dt, v0, x);
		printf("datatype %d checked\n", dt);
	}
	check_refusals();
	/* Failed ones count as errors, not in the success count. */
	uint64_t w = fi_cntr_read(p.k[0]) + fi_cntr_readerr(p.k[0]), r = fi_cntr_read(p.k[1]) + fi_cntr_readerr(p.k[1]);
	CHECK(w == writes && r == reads, "counters: writes %llu of %llu, reads %llu of %llu", (unsigned long long)w,
	      (unsigned long long)writes, (unsigned long long)r, (unsigned long long)reads);
	CHECK(fi_cntr_readerr(p.k[0]) == 1 && fi_cntr_readerr(p.k[1]) == 2, "error counts");
	pair_close(&p);
	printf("all atomics checked\n");
	return 0;
}
