/* Completion levels (FI_TRANSMIT_COMPLETE, FI_DELIVERY_COMPLETE), checked
 * the same way over any provider (FI_PROVIDER selects it; the tests run it
 * over xfer and over libfabric's tcp). One process, endpoints A (sends) and
 * B (receives):
 * - fi_getinfo with tx_attr->op_flags FI_DELIVERY_COMPLETE succeeds and
 *   returns it;
 * - a tagged send with that default, to a receive B posted first: when
 *   A's send completes, the bytes are already in B's buffer (the same
 *   process sees B's memory; B's queue is read only afterwards), as
 *   fi_cq(3) says of delivery complete with an application buffer ready;
 * - the same with a 1 MiB message, flags FI_DELIVERY_COMPLETE on one
 *   fi_tsendmsg;
 * - fi_sendmsg with FI_TRANSMIT_COMPLETE completes, and the message arrives
 *   intact;
 * - a zero-length fi_tsendmsg with FI_DELIVERY_COMPLETE completes once
 *   received.
 * Prints "all completion levels checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "must.h"
#include "drive.h"
#define BIG (1 << 20)

static struct fi_info *info;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_ep *ep_a, *ep_b;
static struct fid_cq *cq_a, *cq_b;
static fi_addr_t addr_b;
/* 0.. the sender's buffer, BIG.. the receiver's. */
static char mem[2 * BIG];
static void *desc;
static int sctx, rctx;

#define S (mem)
#define R (mem + BIG)

/* Waits for A's send completion (driving B without reading its queue:
 * progress on B, reading nothing). */
static void send_done(const char *what)
{
	struct fi_cq_tagged_entry e;
	next_completion(cq_a, cq_b, &e, NULL);
	CHECK(e.op_context == &sctx && (e.flags & FI_SEND), "%s: send completion %p flags %#llx", what, e.op_context,
	      (unsigned long long)e.flags);
}

/* Waits for B's receive completion of `len` bytes. */
static void recv_done(size_t len, const char *what)
{
	struct fi_cq_tagged_entry e;
	next_completion(cq_b, cq_a, &e, NULL);
	CHECK(e.op_context == &rctx && (e.flags & FI_RECV) && e.len == len, "%s: receive completion len %zu", what,
	      e.len);
}

static void fill(size_t len, int seed)
{
	for (size_t i = 0; i < len; i++)
		S[i] = (char)(i * 31 + seed);
	memset(R, 0, len ? len : 1);
}

static int placed(size_t len)
{
	return memcmp(R, S, len) == 0;
}

static void post_trecv(size_t len, uint64_t tag)
{
	MUST(fi_trecv(ep_b, R, len, desc, FI_ADDR_UNSPEC, tag, 0, &rctx));
}

static void tsendmsg(size_t len, uint64_t tag, uint64_t flags)
{
	struct iovec iov = {S, len};
	struct fi_msg_tagged m = {
		.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = addr_b, .tag = tag, .context = &sctx};
	POST(fi_tsendmsg(ep_a, &m, flags));
}

/* A delivery-complete send of `len` bytes to a receive posted first. */
static void delivery(size_t len, uint64_t tag, int per_op, const char *what)
{
	fill(len, (int)tag);
	post_trecv(len, tag);
	if (per_op) {
		tsendmsg(len, tag, FI_DELIVERY_COMPLETE | FI_COMPLETION);
	} else {
		/* The default from tx_attr->op_flags. */
		POST(fi_tsend(ep_a, S, len, desc, addr_b, tag, &sctx));
	}
	send_done(what);
	CHECK(placed(len), "%s: the send completed before its bytes were in the receive buffer", what);
	recv_done(len, what);
	printf("%s checked\n", what);
}

int main(void)
{
	struct fi_info *h = fi_allocinfo();
	struct fid_fabric *fabric;
	struct fid_mr *mr = NULL;
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s\n", info->fabric_attr->prov_name);
	CHECK(info->tx_attr->op_flags & FI_DELIVERY_COMPLETE, "tx op_flags %#llx",
	      (unsigned long long)info->tx_attr->op_flags);
	printf("delivery complete offered\n");
	open_domain(info, mem, sizeof(mem), &fabric, &domain, &mr, &desc);
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &ep_a, &cq_a);
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &ep_b, &cq_b);
	{
		char name[256];
		size_t len = sizeof(name);
		MUST(fi_getname(&ep_b->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &addr_b, 0, NULL) == 1, "insert B");
	}

	delivery(64, 1, 0, "delivery complete by default");
	delivery(BIG, 2, 1, "delivery complete 1 MiB");

	/* Transmit complete on one untagged send. */
	fill(100, 3);
	{
		struct iovec iov = {S, 100};
		struct fi_msg m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = addr_b, .context = &sctx};
		MUST(fi_recv(ep_b, R, 100, desc, FI_ADDR_UNSPEC, &rctx));
		MUST(fi_sendmsg(ep_a, &m, FI_TRANSMIT_COMPLETE | FI_COMPLETION));
		send_done("transmit complete");
		recv_done(100, "transmit complete");
		CHECK(placed(100), "transmit complete: bytes");
	}
	printf("transmit complete checked\n");

	/* An empty message, delivery complete. */
	post_trecv(0, 4);
	tsendmsg(0, 4, FI_DELIVERY_COMPLETE | FI_COMPLETION);
	send_done("empty delivery complete");
	recv_done(0, "empty delivery complete");
	printf("empty delivery complete checked\n");

	close_eps(ep_a, ep_b, cq_a, cq_b);
	close_domain(av, mr, domain, fabric, info);
	printf("all completion levels checked\n");
	return 0;
}
