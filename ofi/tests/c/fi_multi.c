/* Multi-receive buffers (FI_MULTI_RECV), checked the same way over any
 * provider (FI_PROVIDER selects it; the tests run it over xfer and over
 * libfabric's tcp). One process, endpoints A (sends) and B (receives):
 * - the fi_info has FI_MULTI_RECV; FI_OPT_MIN_MULTI_RECV set to 100 and
 *   read back;
 * - one 1024-byte buffer posted with fi_recvmsg(FI_MULTI_RECV) takes
 *   eleven 90-byte messages: each completion has the buffer's context, its
 *   length, and `buf` where it landed, inside the buffer, after the
 *   previous one, with its bytes; the buffer is released (FI_MULTI_RECV on
 *   a completion) once less than 100 bytes are left, not before;
 * - a second buffer, cancelled, reports FI_ECANCELED with its context.
 * Prints "all multi-receives checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

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

static void open_ep(struct fid_ep **ep, struct fid_cq **cq, size_t min)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA};
	MUST(fi_cq_open(domain, &cq_attr, cq, NULL));
	MUST(fi_endpoint(domain, info, ep, NULL));
	if (min) {
		size_t got = 0, len = sizeof(got);
		MUST(fi_setopt(&(*ep)->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)));
		MUST(fi_getopt(&(*ep)->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &got, &len));
		CHECK(got == min && len == sizeof(size_t), "FI_OPT_MIN_MULTI_RECV read back %zu", got);
	}
	MUST(fi_ep_bind(*ep, &av->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	MUST(fi_enable(*ep));
}

/* Region layout: 0.. the sender's messages (100 bytes apart), 2048.. the
 * receiver's multi-receive buffer. */
#define S(off) (mem + (off))
#define R(off) (mem + 2048 + (off))

static int slot;

static ssize_t send_one(void)
{
	return fi_send(ep_a, S(slot * 100), 90, desc, addr_b, NULL);
}

#define NMSG 11

int main(void)
{
	struct fi_info *h = fi_allocinfo();
	struct fid_fabric *fabric;
	struct fid_mr *mr = NULL;
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_data_entry e;
	struct fi_cq_err_entry err;
	static int mctx, cctx;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_MULTI_RECV;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s\n", info->fabric_attr->prov_name);
	CHECK(info->caps & FI_MULTI_RECV, "FI_MULTI_RECV not offered");
	open_domain(info, mem, sizeof(mem), &fabric, &domain, &mr, &desc);
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	open_ep(&ep_a, &cq_a, 0);
	open_ep(&ep_b, &cq_b, 100);
	{
		char name[256];
		size_t len = sizeof(name);
		MUST(fi_getname(&ep_b->fid, name, &len));
		CHECK(fi_av_insert(av, name, 1, &addr_b, 0, NULL) == 1, "insert B");
	}

	/* Sender's messages: 90 bytes each at S(k * 100). */
	for (int k = 0; k < NMSG; k++)
		for (int i = 0; i < 90; i++)
			S(k * 100)[i] = (char)(k * 7 + i);
	char *mbuf = R(0);
	memset(mbuf, 0, 1024);
	struct iovec iov = {mbuf, 1024};
	struct fi_msg m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &mctx};
	MUST(fi_recvmsg(ep_b, &m, FI_MULTI_RECV));
	for (slot = 0; slot < NMSG; slot++)
		POST(send_one());
	int got = 0, released = 0;
	char *last = NULL;
	while (!released) {
		CHECK(next_completion(cq_b, cq_a, &e, &err) == 0, "error %d on the multi-receive buffer", err.err);
		CHECK(e.op_context == &mctx, "completion of another context");
		if (e.flags & FI_MULTI_RECV)
			released = 1;
		if (e.len == 0 && released)
			break; /* a separate release entry */
		char *at = e.buf;
		CHECK(got < NMSG && e.len == 90 && (e.flags & FI_RECV), "message %d: len %zu flags %#llx", got, e.len,
		      (unsigned long long)e.flags);
		CHECK(at >= mbuf && at + 90 <= mbuf + 1024 && (!last || at >= last + 90), "message %d landed at +%td", got,
		      at - mbuf);
		for (int i = 0; i < 90; i++)
			CHECK(at[i] == (char)(got * 7 + i), "message %d byte %d", got, i);
		CHECK(released == (got == NMSG - 1), "buffer released after message %d of %d", got + 1, NMSG);
		last = at;
		got++;
	}
	CHECK(got == NMSG, "%d messages before the release", got);
	printf("multi-receive buffer checked\n");

	/* A second buffer, cancelled. */
	struct fi_msg m2 = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &cctx};
	MUST(fi_recvmsg(ep_b, &m2, FI_MULTI_RECV));
	MUST(fi_cancel(&ep_b->fid, &cctx));
	CHECK(next_completion(cq_b, cq_a, &e, &err) == 1 && err.err == FI_ECANCELED && err.op_context == &cctx,
	      "cancelled buffer: %d", err.err);
	printf("cancelled multi-receive checked\n");

	close_eps(ep_a, ep_b, cq_a, cq_b);
	close_domain(av, mr, domain, fabric, info);
	printf("all multi-receives checked\n");
	return 0;
}
