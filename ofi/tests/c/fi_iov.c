/* Messages of several buffers (iov_count > 1), checked the same way over
 * any provider (FI_PROVIDER selects it; the tests run it over xfer and
 * over libfabric's tcp). One process, endpoints A (sends) and B (receives):
 * - the fi_info offers iov_limit >= 3 both ways;
 * - fi_sendv of two buffers into fi_recvv of three: the bytes land in
 *   order across B's buffers, the completion's length is the total;
 * - fi_tsendmsg of three buffers into fi_trecvmsg of two, with a tag and
 *   the context checked;
 * - fi_recvv of 8 bytes in two buffers getting 12: FI_ETRUNC through
 *   fi_cq_readerr, nothing past the buffers; over xfer len 8 delivered in
 *   order and olen 4 (libfabric's tcp reports 0 for both);
 * - a cancelled fi_recvv reports FI_ECANCELED with its context.
 * Prints "all vectors checked" and exits 0. */
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

static struct fi_info *info;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_ep *ep_a, *ep_b;
static struct fid_cq *cq_a, *cq_b;
static fi_addr_t addr_b;
static char mem[4096];
static void *desc;
static void *descs[4];

/* Region layout: 0.. sender's buffers, 1024.. receiver's. */
#define S(off) (mem + (off))
#define R(off) (mem + 1024 + (off))

static ssize_t send_two(void)
{
	struct iovec iov[2] = {{S(0), 6}, {S(100), 14}};
	return fi_sendv(ep_a, iov, descs, 2, addr_b, NULL);
}

static ssize_t tsend_three(void)
{
	struct iovec iov[3] = {{S(200), 4}, {S(300), 4}, {S(400), 4}};
	struct fi_msg_tagged m = {
		.msg_iov = iov, .desc = descs, .iov_count = 3, .addr = addr_b, .tag = 0x77, .context = NULL};
	return fi_tsendmsg(ep_a, &m, FI_COMPLETION);
}

static ssize_t send_twelve(void)
{
	struct iovec iov[2] = {{S(500), 5}, {S(600), 7}};
	return fi_sendv(ep_a, iov, descs, 2, addr_b, NULL);
}

int main(void)
{
	struct fi_info *h = fi_allocinfo();
	struct fid_fabric *fabric;
	struct fid_mr *mr = NULL;
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	static int ctx1, ctx2, ctx3, ctx4;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->tx_attr->iov_limit = 3;
	h->rx_attr->iov_limit = 3;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s, iov_limit tx %zu rx %zu\n", info->fabric_attr->prov_name, info->tx_attr->iov_limit,
	       info->rx_attr->iov_limit);
	CHECK(info->tx_attr->iov_limit >= 3 && info->rx_attr->iov_limit >= 3, "iov_limit below 3");
	open_domain(info, mem, sizeof(mem), &fabric, &domain, &mr, &desc);
	for (int i = 0; i < 4; i++)
		descs[i] = desc;
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &ep_a, &cq_a);
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &ep_b, &cq_b);
	{
		char name[256];
		size_t len = sizeof(name);
		fi_addr_t self;
		MUST(fi_getname(&ep_a->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &self, 0, NULL) == 1, "insert A");
		len = sizeof(name);
		MUST(fi_getname(&ep_b->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &addr_b, 0, NULL) == 1, "insert B");
	}

	/* Two buffers into three. */
	memcpy(S(0), "hello ", 6);
	memcpy(S(100), "vectored world", 14);
	memset(R(0), '.', 300);
	struct iovec r3[3] = {{R(0), 3}, {R(10), 5}, {R(20), 100}};
	MUST(fi_recvv(ep_b, r3, descs, 3, FI_ADDR_UNSPEC, &ctx1));
	POST(send_two());
	CHECK(next_completion(cq_b, cq_a, &e, &err) == 0, "error %d on the vectored receive", err.err);
	CHECK(e.op_context == &ctx1 && e.len == 20 && (e.flags & FI_RECV), "completion len %zu", e.len);
	CHECK(!memcmp(R(0), "hel", 3) && !memcmp(R(10), "lo ve", 5) && !memcmp(R(20), "ctored world", 12) &&
		      R(3)[0] == '.' && R(15)[0] == '.' && R(32)[0] == '.',
	      "scattered bytes: '%.3s' '%.5s' '%.12s'", R(0), R(10), R(20));
	printf("sendv into recvv checked\n");

	/* Three tagged buffers into two. */
	memcpy(S(200), "abcd", 4);
	memcpy(S(300), "efgh", 4);
	memcpy(S(400), "ijkl", 4);
	struct iovec r2[2] = {{R(100), 5}, {R(200), 20}};
	struct fi_msg_tagged tm = {
		.msg_iov = r2, .desc = descs, .iov_count = 2, .addr = FI_ADDR_UNSPEC, .tag = 0x77, .context = &ctx2};
	MUST(fi_trecvmsg(ep_b, &tm, FI_COMPLETION));
	POST(tsend_three());
	CHECK(next_completion(cq_b, cq_a, &e, &err) == 0, "error %d on the tagged vectored receive", err.err);
	CHECK(e.op_context == &ctx2 && e.len == 12 && e.tag == 0x77, "tagged completion len %zu", e.len);
	CHECK(!memcmp(R(100), "abcde", 5) && !memcmp(R(200), "fghijkl", 7), "tagged scattered bytes");
	printf("tsendmsg into trecvmsg checked\n");

	/* Truncated. */
	memcpy(S(500), "01234", 5);
	memcpy(S(600), "5678901", 7);
	memset(R(300), '.', 64);
	struct iovec rt[2] = {{R(300), 3}, {R(310), 5}};
	MUST(fi_recvv(ep_b, rt, descs, 2, FI_ADDR_UNSPEC, &ctx3));
	POST(send_twelve());
	CHECK(next_completion(cq_b, cq_a, &e, &err) == 1, "a 12-byte message into 8 bytes completed without error");
	/* olen: the bytes that did not fit (fi_cq(3)); libfabric's tcp reports
	 * 0, xfer must report them. */
	int xfer = !strcmp(info->fabric_attr->prov_name, "xfer");
	CHECK(err.err == FI_ETRUNC && err.op_context == &ctx3 && (err.olen == 4 || (!xfer && err.olen == 0)),
	      "truncation err %d olen %zu", err.err, err.olen);
	CHECK(err.len == 8 || (!xfer && err.len == 0), "truncated len %zu", err.len);
	CHECK(err.len == 0 || (!memcmp(R(300), "012", 3) && !memcmp(R(310), "34567", 5)), "truncated bytes");
	CHECK(R(303)[0] == '.' && R(315)[0] == '.', "bytes written past the buffers");
	printf("truncated recvv checked\n");

	/* Cancelled. */
	struct iovec rc[2] = {{R(400), 8}, {R(500), 8}};
	MUST(fi_recvv(ep_b, rc, descs, 2, FI_ADDR_UNSPEC, &ctx4));
	MUST(fi_cancel(&ep_b->fid, &ctx4));
	CHECK(next_completion(cq_b, cq_a, &e, &err) == 1 && err.err == FI_ECANCELED && err.op_context == &ctx4,
	      "cancelled recvv: %d", err.err);
	printf("cancelled recvv checked\n");

	close_eps(ep_a, ep_b, cq_a, cq_b);
	close_domain(av, mr, domain, fabric, info);
	printf("all vectors checked\n");
	return 0;
}
