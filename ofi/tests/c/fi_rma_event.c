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
 *   not reported there.
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
#include <time.h>

#include "must.h"
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
	struct fi_info *h = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep_a, *ep_b;
	struct fid_mr *mr_a, *mr_b;
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_data_entry e;
	static char local[4 * LEN], target[4 * LEN];
	static int ctx;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_RMA | FI_RMA_EVENT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s, mr_mode %#x\n", info->fabric_attr->prov_name, info->domain_attr->mr_mode);
	CHECK(info->caps & FI_RMA_EVENT, "FI_RMA_EVENT not offered");
	int virt = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &domain, NULL));
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	MUST(fi_cntr_open(domain, &cntr_attr, &rw, NULL));
	MUST(fi_cntr_open(domain, &cntr_attr, &rr, NULL));
	open_ep(domain, info, av, &ep_a, &cq_a, NULL, 0, NULL, 0);
	open_ep(domain, info, av, &ep_b, &cq_b, rw, FI_REMOTE_WRITE, rr, FI_REMOTE_READ);
	MUST(fi_mr_reg(domain, local, sizeof(local), FI_WRITE | FI_READ, 0, 0, 0, &mr_a, NULL));
	MUST(fi_mr_reg(domain, target, sizeof(target), FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 1, 0, &mr_b, NULL));
	if (info->domain_attr->mr_mode & (FI_MR_ENDPOINT | FI_MR_RMA_EVENT)) {
		MUST(fi_mr_bind(mr_b, &ep_b->fid, 0));
		if (info->domain_attr->mr_mode & FI_MR_RMA_EVENT)
			MUST(fi_mr_bind(mr_b, &rw->fid, FI_REMOTE_WRITE));
		MUST(fi_mr_enable(mr_b));
	}
	void *desc = fi_mr_desc(mr_a);
	uint64_t key = fi_mr_key(mr_b), base = virt ? (uint64_t)(uintptr_t)target : 0;
	fi_addr_t b;
	{
		char name[256];
		size_t len = sizeof(name);
		MUST(fi_getname(&ep_b->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &b, 0, NULL) == 1, "insert B");
	}
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

	MUST(fi_close(&ep_a->fid));
	MUST(fi_close(&ep_b->fid));
	MUST(fi_close(&mr_a->fid));
	MUST(fi_close(&mr_b->fid));
	MUST(fi_close(&cq_a->fid));
	MUST(fi_close(&cq_b->fid));
	MUST(fi_close(&rw->fid));
	MUST(fi_close(&rr->fid));
	MUST(fi_close(&av->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("all rma events checked\n");
	return 0;
}
