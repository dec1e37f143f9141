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
 *   remote segments than tx_attr->rma_iov_limit is -FI_EINVAL;
 * - fi_inject_writedata and fi_writemsg with FI_REMOTE_CQ_DATA: one target
 *   entry each (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, its data, no context),
 *   the bytes in place by then; the write counter two more;
 * - several remote segments (tx_attr->rma_iov_limit of at least 3):
 *   fi_writemsg of two local buffers (300 bytes, 700 bytes + 1 MiB) with
 *   FI_REMOTE_CQ_DATA into three segments of B's region (200, 500 bytes and
 *   300 bytes + 1 MiB, out of address order): B's CQ gets one FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA entry with
 *   the data, by which every byte is in its place and none outside; A one
 *   completion, the write counter one more; fi_readmsg of the three segments
 *   into one buffer brings the bytes back in order, one completion, the
 *   read counter one more.
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

#include "must.h"
#include "drive.h"
#include "rma_pair.h"

#define LEN 1000
#define BIG (1 << 20)

/* Whether B's CQ stays empty while driven a while. */
static int b_quiet(void)
{
	struct fi_cq_data_entry e;
	for (int i = 0; i < 100; i++)
		if (fi_cq_read(cq_b, &e, 1) != -FI_EAGAIN)
			return 0;
	return 1;
}

int main(void)
{
	static const uint64_t on_a[2] = {FI_WRITE, FI_READ}, none[2] = {0, 0};
	struct pair p;
	struct fi_cq_data_entry e;
	static char local[6 * LEN + 2 * (LEN + BIG)], target[3 * LEN + BIG];
	static int wctx, rctx, dctx, vwctx, vrctx, mrctx, swctx, srctx;
	pair_open(&p, FI_MSG | FI_RMA | FI_READ | FI_WRITE, local, sizeof(local), target, sizeof(target), on_a, none);
	struct fid_ep *ep_a = p.ep_a;
	struct fid_cntr *wcntr = p.k[0], *rcntr = p.k[1];
	void *desc = p.desc;
	uint64_t key = p.key, base = p.base;
	fi_addr_t b = p.b;

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
	CHECK(p.info->tx_attr->iov_limit >= 3, "tx iov_limit %zu", p.info->tx_attr->iov_limit);
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

		/* Several remote segments: 1 MiB and 1000 bytes from two local
		 * buffers into three places of B's region (the last segment 1 MiB,
		 * so a target entry that came before it would find it partly
		 * written) and back. */
		if (p.info->tx_attr->rma_iov_limit >= 3) {
			char *from = local + 6 * LEN, *back = from + LEN + BIG;
			void *two[2] = {desc, desc};
			for (int i = 0; i < LEN + BIG; i++)
				from[i] = (char)(i * 11 + 5);
			memset(target, 0, sizeof(target));
			struct iovec parts[2] = {{from, 300}, {from + 300, 700 + BIG}};
			struct fi_rma_iov segs[3] = {
				{.addr = base + 1500, .len = 200, .key = key},
				{.addr = base + 100, .len = 500, .key = key},
				{.addr = base + 2 * LEN, .len = 300 + BIG, .key = key},
			};
			struct fi_msg_rma smsg = {.msg_iov = parts, .desc = two, .iov_count = 2, .addr = b, .rma_iov = segs,
						 .rma_iov_count = 3, .context = &swctx, .data = 0x5e65};
			uint64_t writes = fi_cntr_read(wcntr), reads = fi_cntr_read(rcntr);
			POST(fi_writemsg(ep_a, &smsg, FI_COMPLETION | FI_REMOTE_CQ_DATA));
			/* The target's one entry comes once every segment is in place. */
			one(cq_b, cq_a, &e);
			CHECK((e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
				      e.data == 0x5e65,
			      "segmented write: target entry flags %#llx data %#llx", (unsigned long long)e.flags,
			      (unsigned long long)e.data);
			CHECK(!memcmp(target + 1500, from, 200) && !memcmp(target + 100, from + 200, 500) &&
				      !memcmp(target + 2 * LEN, from + 700, 300 + BIG),
			      "segmented write: bytes not in place when the target's entry came");
			one(cq_a, cq_b, &e);
			CHECK(e.op_context == &swctx && (e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE),
			      "segmented write completion %#llx", (unsigned long long)e.flags);
			CHECK(fi_cntr_read(wcntr) == writes + 1, "segmented write counted %llu times",
			      (unsigned long long)(fi_cntr_read(wcntr) - writes));
			CHECK(b_quiet(), "a second target entry for one segmented write");
			CHECK(target[0] == 0 && target[99] == 0 && target[600] == 0 && target[1499] == 0 && target[1999] == 0,
			      "segmented write: bytes outside the segments");
			printf("segmented writemsg checked\n");

			memset(back, 0, LEN + BIG);
			struct iovec rv = {back, LEN + BIG};
			smsg.msg_iov = &rv;
			smsg.iov_count = 1;
			smsg.context = &srctx;
			POST(fi_readmsg(ep_a, &smsg, FI_COMPLETION));
			one(cq_a, cq_b, &e);
			CHECK(e.op_context == &srctx && (e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ),
			      "segmented read completion %#llx", (unsigned long long)e.flags);
			CHECK(!memcmp(back, from, LEN + BIG), "segmented read: bytes");
			CHECK(fi_cntr_read(rcntr) == reads + 1, "segmented read counted %llu times",
			      (unsigned long long)(fi_cntr_read(rcntr) - reads));
			printf("segmented readmsg checked\n");
		} else {
			printf("several remote segments not offered\n");
		}

		/* Remote CQ data from fi_inject_writedata and from fi_writemsg:
		 * one target entry each, with its data. */
		{
			static int dmctx;
			uint64_t writes = fi_cntr_read(wcntr);
			for (int i = 0; i < 108; i++)
				local[i] = (char)(i * 13 + 7);
			POST(fi_inject_writedata(ep_a, local, 8, 0xfeed, b, base + 1900, key));
			one(cq_b, cq_a, &e);
			printf("target entry: context %p len %zu flags %#llx\n", e.op_context, e.len,
			       (unsigned long long)e.flags);
			CHECK((e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
				      e.data == 0xfeed && e.op_context == NULL,
			      "inject_writedata: target entry flags %#llx data %#llx", (unsigned long long)e.flags,
			      (unsigned long long)e.data);
			CHECK(!memcmp(target + 1900, local, 8), "inject_writedata: bytes not in place with its entry");
			struct iovec v = {local + 8, 100};
			struct fi_rma_iov r = {.addr = base + 1800, .len = 100, .key = key};
			struct fi_msg_rma m = {.msg_iov = &v, .desc = &desc, .iov_count = 1, .addr = b, .rma_iov = &r,
					       .rma_iov_count = 1, .context = &dmctx, .data = 0xbead};
			POST(fi_writemsg(ep_a, &m, FI_COMPLETION | FI_REMOTE_CQ_DATA));
			one(cq_b, cq_a, &e);
			CHECK((e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
				      e.data == 0xbead,
			      "writemsg with FI_REMOTE_CQ_DATA: target entry flags %#llx data %#llx",
			      (unsigned long long)e.flags, (unsigned long long)e.data);
			CHECK(!memcmp(target + 1800, local + 8, 100), "writemsg: bytes not in place with its entry");
			one(cq_a, cq_b, &e);
			CHECK(e.op_context == &dmctx, "writemsg with FI_REMOTE_CQ_DATA: completion %p", e.op_context);
			CHECK(fi_cntr_read(wcntr) == writes + 2, "the two writes with data counted %llu times",
			      (unsigned long long)(fi_cntr_read(wcntr) - writes));
			CHECK(b_quiet(), "another target entry");
			printf("remote cq data checked\n");
		}

		struct fi_rma_iov over[8] = {rma, rma, rma, rma, rma, rma, rma, rma};
		printf("rma_iov_limit %zu\n", p.info->tx_attr->rma_iov_limit);
		if (p.info->tx_attr->rma_iov_limit < 8) {
			msg.rma_iov = over;
			msg.rma_iov_count = p.info->tx_attr->rma_iov_limit + 1;
			msg.iov_count = 1;
			ssize_t r = fi_writemsg(ep_a, &msg, 0);
			CHECK(r == -FI_EINVAL, "writemsg beyond rma_iov_limit = %zd", r);
		}
		printf("rma_iov_limit checked\n");
	}

	pair_close(&p);
	printf("all rma checked\n");
	return 0;
}
