/* RMA with counters, checked the same way over any provider (FI_PROVIDER
 * selects it; the tests run it over xfer and over libfabric's tcp). One
 * process, endpoint A (initiator, with a write and a read counter) and B
 * (target), both driven while waiting (progress is manual):
 * - FI_RMA with FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
 *   FI_MR_PROV_KEY offered; B's region registered for remote access, its
 *   key and address given to A;
 * - fi_write of 1000 bytes: A's completion (FI_RMA | FI_WRITE), the write
 *   counter at 1 (fi_cntr_wait returns at once), the bytes in B's memory;
 * - fi_read of them back: FI_RMA | FI_READ, the read counter at 1;
 * - fi_writedata: B's CQ gets FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA with the
 *   data, the bytes land, the write counter at 2;
 * - several local buffers (tx_attr->iov_limit of at least 3): fi_writev of
 *   three buffers (100, 300, 600 bytes) lands in order in B's memory, the
 *   write counter at 3; fi_readv of it into three buffers (500, 1, 499)
 *   brings the bytes back in order, the read counter at 2; fi_readmsg of
 *   two buffers with FI_COMPLETION the same; an fi_writemsg with more
 *   remote segments than tx_attr->rma_iov_limit is -FI_EINVAL.
 * Prints "all rma checked" and exits 0. */
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

static struct fid_cntr *wcntr, *rcntr;

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
	static char local[6 * LEN], target[2 * LEN];
	static int wctx, rctx, dctx, vwctx, vrctx, mrctx;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_RMA;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s, mr_mode %#x\n", info->fabric_attr->prov_name, info->domain_attr->mr_mode);
	CHECK((info->caps & (FI_RMA | FI_READ | FI_WRITE)) == (FI_RMA | FI_READ | FI_WRITE), "FI_RMA not offered");
	int virt = info->domain_attr->mr_mode & FI_MR_VIRT_ADDR;
	MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &domain, NULL));
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	MUST(fi_cntr_open(domain, &cntr_attr, &wcntr, NULL));
	MUST(fi_cntr_open(domain, &cntr_attr, &rcntr, NULL));
	open_ep(domain, info, av, &ep_a, &cq_a, wcntr, FI_WRITE, rcntr, FI_READ);
	open_ep(domain, info, av, &ep_b, &cq_b, NULL, 0, NULL, 0);
	MUST(fi_mr_reg(domain, local, sizeof(local), FI_WRITE | FI_READ, 0, 0, 0, &mr_a, NULL));
	MUST(fi_mr_reg(domain, target, sizeof(target), FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 1, 0, &mr_b, NULL));
	if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
		MUST(fi_mr_bind(mr_b, &ep_b->fid, 0));
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

	/* fi_write. */
	for (int i = 0; i < LEN; i++)
		local[i] = (char)(i * 3 + 1);
	POST(fi_write(ep_a, local, LEN, desc, b, base, key, &wctx));
	one(cq_a, cq_b, &e);
	CHECK(e.op_context == &wctx && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE), "write completion %#llx",
	      (unsigned long long)e.flags);
	CHECK(fi_cntr_read(wcntr) == 1 && fi_cntr_wait(wcntr, 1, 1000) == 0, "write counter %llu",
	      (unsigned long long)fi_cntr_read(wcntr));
	CHECK(landed(target, local, LEN), "written bytes");
	printf("write checked\n");

	/* fi_read. */
	POST(fi_read(ep_a, local + LEN, LEN, desc, b, base, key, &rctx));
	one(cq_a, cq_b, &e);
	CHECK(e.op_context == &rctx && (e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ), "read completion");
	CHECK(fi_cntr_read(rcntr) == 1 && !memcmp(local + LEN, local, LEN), "read counter and bytes");
	printf("read checked\n");

	/* fi_writedata: the target's CQ gets the data. */
	for (int i = 0; i < LEN; i++)
		local[2 * LEN + i] = (char)(i * 5 + 2);
	POST(fi_writedata(ep_a, local + 2 * LEN, LEN, desc, 0xd00d, b, base + LEN, key, &dctx));
	one(cq_a, cq_b, &e);
	CHECK(e.op_context == &dctx, "writedata completion");
	one(cq_b, cq_a, &e);
	CHECK((e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
		      e.data == 0xd00d,
	      "target completion flags %#llx data %#llx", (unsigned long long)e.flags, (unsigned long long)e.data);
	CHECK(landed(target + LEN, local + 2 * LEN, LEN) && fi_cntr_read(wcntr) == 2, "writedata bytes and counter");
	printf("writedata checked\n");

	/* Several local buffers: fi_writev, fi_readv, fi_readmsg. */
	CHECK(info->tx_attr->iov_limit >= 3, "tx iov_limit %zu", info->tx_attr->iov_limit);
	{
		char *src = local + 3 * LEN, *dst = local + 4 * LEN;
		void *descs[3] = {desc, desc, desc};
		for (int i = 0; i < LEN; i++)
			src[i] = (char)(i * 7 + 3);
		struct iovec wv[3] = {{src, 100}, {src + 100, 300}, {src + 400, 600}};
		POST(fi_writev(ep_a, wv, descs, 3, b, base, key, &vwctx));
		one(cq_a, cq_b, &e);
		CHECK(e.op_context == &vwctx && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE),
		      "writev completion %#llx", (unsigned long long)e.flags);
		CHECK(landed(target, src, LEN) && fi_cntr_read(wcntr) == 3, "writev bytes and counter %llu",
		      (unsigned long long)fi_cntr_read(wcntr));
		printf("writev checked\n");

		memset(dst, 0, LEN);
		struct iovec rv[3] = {{dst + 499, 1}, {dst, 499}, {dst + 500, 500}};
		/* Read B's bytes 0..500 into dst+499 (1), dst (499) and dst+500 (500). */
		POST(fi_readv(ep_a, rv, descs, 3, b, base, key, &vrctx));
		one(cq_a, cq_b, &e);
		CHECK(e.op_context == &vrctx && (e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ),
		      "readv completion");
		CHECK(fi_cntr_read(rcntr) == 2, "read counter %llu", (unsigned long long)fi_cntr_read(rcntr));
		CHECK(dst[499] == src[0] && !memcmp(dst, src + 1, 499) && !memcmp(dst + 500, src + 500, 500),
		      "readv bytes");
		printf("readv checked\n");

		memset(dst, 0, LEN);
		struct iovec mv[2] = {{dst + 600, 400}, {dst, 600}};
		struct fi_rma_iov rma = {.addr = base, .len = LEN, .key = key};
		struct fi_msg_rma msg = {.msg_iov = mv, .desc = descs, .iov_count = 2, .addr = b,
					 .rma_iov = &rma, .rma_iov_count = 1, .context = &mrctx};
		POST(fi_readmsg(ep_a, &msg, FI_COMPLETION));
		one(cq_a, cq_b, &e);
		CHECK(e.op_context == &mrctx && (e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ),
		      "readmsg completion");
		CHECK(!memcmp(dst + 600, src, 400) && !memcmp(dst, src + 400, 600), "readmsg bytes");
		printf("readmsg checked\n");

		size_t limit = info->tx_attr->rma_iov_limit;
		printf("rma_iov_limit %zu\n", limit);
		if (limit < 4) {
			struct fi_rma_iov rmas[4] = {rma, rma, rma, rma};
			msg.rma_iov = rmas;
			msg.rma_iov_count = limit + 1;
			msg.iov_count = 1;
			ssize_t r = fi_writemsg(ep_a, &msg, 0);
			CHECK(r == -FI_EINVAL, "writemsg beyond rma_iov_limit = %zd", r);
		}
		printf("rma_iov_limit checked\n");
	}

	MUST(fi_close(&ep_a->fid));
	MUST(fi_close(&ep_b->fid));
	MUST(fi_close(&mr_a->fid));
	MUST(fi_close(&mr_b->fid));
	MUST(fi_close(&cq_a->fid));
	MUST(fi_close(&cq_b->fid));
	MUST(fi_close(&wcntr->fid));
	MUST(fi_close(&rcntr->fid));
	MUST(fi_close(&av->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("all rma checked\n");
	return 0;
}
