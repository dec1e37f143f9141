/* Remote counters (FI_RMA_EVENT), checked the same way over any provider
 * (FI_PROVIDER selects it; the tests run it over xfer and over libfabric's
 * tcp). One process, endpoint A (initiator) and B (target, with a counter
 * bound for FI_REMOTE_WRITE and one for FI_REMOTE_READ):
 * - FI_RMA | FI_RMA_EVENT offered;
 * - two fi_write, an fi_inject_write and an fi_writedata into B's region
 *   count 1, 2, 3, 4 on B's remote-write counter (fi_cntr_wait drives B), and
 *   their bytes land; two fi_read count 1, 2 on the remote-read counter and
 *   bring the bytes back; neither counter moves for the other kind;
 * - B's CQ gets only the fi_writedata's entry (FI_REMOTE_WRITE |
 *   FI_REMOTE_CQ_DATA with its data): plain RMA at the target is counted,
 *   not reported there;
 * - a counter bound to a region (a second region of B, registered with
 *   FI_RMA_EVENT; fi_mr_bind with FI_REMOTE_WRITE | FI_REMOTE_READ, then
 *   fi_mr_enable): an fi_write, an fi_read and an fi_writedata into that
 *   region count 1, 2, 3 on it (and on B's endpoint counters as well), a
 *   write into the first region does not; flags other than those two
 *   -FI_EBADFLAGS, none -FI_EINVAL; closing the counter while the region is
 *   open -FI_EBUSY, after it 0.
 * Prints "all rma events checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "must.h"
#include "drive.h"
#include "rma_pair.h"

#define LEN 1000

static struct fid_cntr *rw, *rr;

/* Waits until `k` reaches `n` (driving its endpoint), then checks it is
 * exactly `n` and that `other` still reads `other_n`. */
static void counted(struct fid_cntr *k, uint64_t n, struct fid_cntr *other, uint64_t other_n, const char *what)
{
	int r = fi_cntr_wait(k, n, WAIT_SEC * 1000);
	CHECK(r == 0, "%s: fi_cntr_wait = %d, count %llu of %llu", what, r, (unsigned long long)fi_cntr_read(k),
	      (unsigned long long)n);
	CHECK(fi_cntr_read(k) == n && fi_cntr_readerr(k) == 0, "%s: count %llu", what,
	      (unsigned long long)fi_cntr_read(k));
	CHECK(fi_cntr_read(other) == other_n, "%s: the other counter moved to %llu", what,
	      (unsigned long long)fi_cntr_read(other));
}

int main(void)
{
	static const uint64_t none[2] = {0, 0}, on_b[2] = {FI_REMOTE_WRITE, FI_REMOTE_READ};
	struct pair p;
	struct fi_cq_data_entry e;
	static char local[4 * LEN], target[4 * LEN];
	static int ctx;
	pair_open(&p, FI_MSG | FI_RMA | FI_RMA_EVENT, local, sizeof(local), target, sizeof(target), none, on_b);
	struct fid_ep *ep_a = p.ep_a;
	void *desc = p.desc;
	uint64_t key = p.key, base = p.base;
	fi_addr_t b = p.b;
	rw = p.k[0];
	rr = p.k[1];
	for (int i = 0; i < 4 * LEN; i++)
		local[i] = (char)(i * 3 + 1);

	/* Writes of every kind count on the remote-write counter. */
	POST(fi_write(ep_a, local, LEN, desc, b, base, key, &ctx));
	one(cq_a, cq_b, &e);
	counted(rw, 1, rr, 0, "first write");
	CHECK(landed(target, local, LEN), "first write's bytes");
	POST(fi_write(ep_a, local + LEN, LEN, desc, b, base + LEN, key, &ctx));
	one(cq_a, cq_b, &e);
	counted(rw, 2, rr, 0, "second write");
	POST(fi_inject_write(ep_a, local + 2 * LEN, 8, b, base + 2 * LEN, key));
	counted(rw, 3, rr, 0, "inject write");
	CHECK(landed(target + 2 * LEN, local + 2 * LEN, 8), "inject write's bytes");
	POST(fi_writedata(ep_a, local + 3 * LEN, LEN, desc, 0xbeef, b, base + 3 * LEN, key, &ctx));
	one(cq_a, cq_b, &e);
	counted(rw, 4, rr, 0, "writedata");
	CHECK(landed(target + 3 * LEN, local + 3 * LEN, LEN), "writedata's bytes");
	printf("remote writes counted\n");

	/* Reads on the remote-read counter. */
	static char back[2 * LEN];
	static int rctx;
	POST(fi_read(ep_a, back, LEN, NULL, b, base, key, &rctx));
	one(cq_a, cq_b, &e);
	counted(rr, 1, rw, 4, "first read");
	POST(fi_read(ep_a, back + LEN, LEN, NULL, b, base + LEN, key, &rctx));
	one(cq_a, cq_b, &e);
	counted(rr, 2, rw, 4, "second read");
	CHECK(!memcmp(back, local, 2 * LEN), "read bytes");
	printf("remote reads counted\n");

	/* B's CQ: the writedata's entry, nothing for the plain RMA. */
	one(cq_b, cq_a, &e);
	CHECK((e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
		      e.data == 0xbeef,
	      "target entry flags %#llx data %#llx", (unsigned long long)e.flags, (unsigned long long)e.data);
	for (int i = 0; i < 100; i++) {
		ssize_t r = fi_cq_read(cq_b, &e, 1);
		CHECK(r == -FI_EAGAIN, "B's CQ has another entry (%zd): flags %#llx", r, (unsigned long long)e.flags);
	}
	printf("target queue checked\n");

	/* A counter bound to a second region of B. */
	{
		static char region_c[LEN];
		struct fid_mr *mr_c;
		struct fid_cntr *kc;
		struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
		MUST(fi_cntr_open(p.domain, &cntr_attr, &kc, NULL));
		MUST(fi_mr_reg(p.domain, region_c, sizeof(region_c), FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 2, FI_RMA_EVENT,
			       &mr_c, NULL));
		int r = fi_mr_bind(mr_c, &kc->fid, FI_SEND);
		CHECK(r == -FI_EBADFLAGS, "fi_mr_bind of a counter for FI_SEND = %d", r);
		r = fi_mr_bind(mr_c, &kc->fid, 0);
		CHECK(r == -FI_EINVAL, "fi_mr_bind of a counter for nothing = %d", r);
		MUST(fi_mr_bind(mr_c, &kc->fid, FI_REMOTE_WRITE | FI_REMOTE_READ));
		if (p.info->domain_attr->mr_mode & FI_MR_ENDPOINT)
			MUST(fi_mr_bind(mr_c, &p.ep_b->fid, 0));
		MUST(fi_mr_enable(mr_c));
		uint64_t key_c = fi_mr_key(mr_c), base_c = base ? (uint64_t)(uintptr_t)region_c : 0;

		POST(fi_write(ep_a, local, LEN, desc, b, base_c, key_c, &ctx));
		one(cq_a, cq_b, &e);
		counted(kc, 1, rr, 2, "write into the counted region");
		CHECK(landed(region_c, local, LEN), "bytes of the write into the counted region");
		counted(rw, 5, rr, 2, "the endpoint's count of it");
		POST(fi_read(ep_a, back, LEN, NULL, b, base_c, key_c, &rctx));
		one(cq_a, cq_b, &e);
		counted(kc, 2, rw, 5, "read from the counted region");
		counted(rr, 3, rw, 5, "the endpoint's count of it");
		POST(fi_write(ep_a, local + LEN, LEN, desc, b, base, key, &ctx));
		one(cq_a, cq_b, &e);
		counted(rw, 6, kc, 2, "write into the other region");
		POST(fi_writedata(ep_a, local + 2 * LEN, LEN, desc, 0xc0de, b, base_c, key_c, &ctx));
		one(cq_a, cq_b, &e);
		counted(kc, 3, rr, 3, "writedata into the counted region");
		one(cq_b, cq_a, &e);
		CHECK((e.flags & FI_REMOTE_CQ_DATA) && e.data == 0xc0de, "writedata's target entry data %#llx",
		      (unsigned long long)e.data);
		r = fi_close(&kc->fid);
		CHECK(r == -FI_EBUSY, "closing a counter bound to an open region = %d", r);
		MUST(fi_close(&mr_c->fid));
		MUST(fi_close(&kc->fid));
		printf("region counter checked\n");
	}

	pair_close(&p);
	printf("all rma events checked\n");
	return 0;
}
