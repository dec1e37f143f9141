/*
 * The cost of the plug-in's small-message path, without the noise of waiting:
 * the libfabric twin of examples/path_cost.rs. Two RDM endpoints of one
 * process (each with its own FI_CQ_FORMAT_TAGGED CQ bound for transmit and
 * receive, FI_WAIT_NONE, as Open MPI's ofi MTL opens them) ping-pong a tagged
 * message, driven by one thread. The calls are the MTL's for a blocking
 * MPI_Send/MPI_Recv of a small message: fi_trecv, fi_tinjectdata (the MTL
 * puts the sender's rank in the CQ data) and fi_cq_read of up to 100 entries
 * until the receive completes, and once more (the MTL reads until
 * -FI_EAGAIN). Loopback TCP delivers within the sending call,
 * so almost every read finds its message, and callgrind's count of
 * measured() divided by the iterations is the software cost of one round
 * trip through libfabric, the plug-in and xfer:
 *
 *   cc -O2 -g ofi/tests/c/path_cost.c -o /tmp/ofi_path_cost -lfabric
 *   FI_PROVIDER=xfer FI_PROVIDER_PATH=target/release XFER_PROVIDER=tcp \
 *   XFER_TCP_ADDR=127.0.0.1 valgrind --tool=callgrind \
 *       --toggle-collect=measured /tmp/ofi_path_cost 20000 64
 *
 * It checks every payload and prints the reads that found nothing before
 * the message, so a count polluted by waiting shows as such (docs/OFI.md,
 * "Path cost").
 *
 * A third argument EMPTY then reads a's CQ that many times with nothing
 * sent (each must be -FI_EAGAIN and poll: a spinning reader's empty read),
 * counted apart with --toggle-collect=idle_reads. PATH_COST_THREADING=domain
 * opens the domain FI_THREAD_DOMAIN, as Open MPI's MTL does (else
 * FI_THREAD_SAFE, as fi_pingpong's default). PATH_COST_SEND=tsenddata sends
 * by fi_tsenddata with a context instead (what the MTL posts above
 * inject_size): each send then completes into its CQ too, and that
 * completion is read (and checked) with the receives.
 * ofi/tests/c_suite.rs runs it briefly so that it keeps working.
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "must.h"

#define TAG 7
#define MAXSIZE 4096

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
	int rank;
	char sbuf[MAXSIZE], rbuf[MAXSIZE];
	int recv_ctx;
	int send_ctx;
};

static size_t size;
static unsigned long empty;
static int by_send; /* PATH_COST_SEND=tsenddata */
static unsigned long sent, sends_done;

/* Whether e is s's own send completion (only with by_send). */
static int own_send(const struct side *s, const struct fi_cq_tagged_entry *e)
{
	return by_send && e->op_context == &s->send_ctx && (e->flags & FI_SEND) && (e->flags & FI_TAGGED);
}

/* Takes s's own send completions out of the n entries of e; the count left. */
static ssize_t drop_sends(const struct side *s, struct fi_cq_tagged_entry *e, ssize_t n)
{
	ssize_t kept = 0;
	for (ssize_t k = 0; k < n; k++)
		if (own_send(s, &e[k]))
			sends_done++;
		else
			e[kept++] = e[k];
	return kept;
}

static void post_recv(struct side *s)
{
	MUST(fi_trecv(s->ep, s->rbuf, size, NULL, s->peer, TAG, 0, &s->recv_ctx));
}

/* Reads s's CQ until its receive completes, then once more, as Open MPI's
 * MTL reads until -FI_EAGAIN after every hit (ompi_mtl_ofi_progress); checks
 * the completion and the payload. While nothing has come, a second empty read
 * in a row also reads other's CQ: connection set-up needs both sides. */
static void reap(struct side *s, struct side *other, unsigned char seq)
{
	struct fi_cq_tagged_entry e[100];
	int got = 0, streak = 0;
	for (;;) {
		ssize_t n = fi_cq_read(s->cq, e, 100);
		if (n == -FI_EAGAIN) {
			if (got)
				return;
			empty++;
			if (streak++ == 0)
				continue;
			struct fi_cq_tagged_entry o[100];
			ssize_t m = fi_cq_read(other->cq, o, 100);
			if (m != -FI_EAGAIN && m < 0)
				MUST(m);
			if (m > 0 && drop_sends(other, o, m) > 0) {
				fprintf(stderr, "FATAL: unexpected completion on the other side\n");
				exit(2);
			}
			continue;
		}
		MUST(n);
		n = drop_sends(s, e, n);
		if (n == 0)
			continue;
		if (got || n != 1 || e[0].op_context != &s->recv_ctx || e[0].len != size || e[0].tag != TAG ||
		    !(e[0].flags & FI_REMOTE_CQ_DATA) || e[0].data != (uint64_t)other->rank) {
			fprintf(stderr, "FATAL: bad completion (n %zd, len %zu, tag %lu, data %lu)\n", n,
				n > 0 ? e[0].len : 0, n > 0 ? (unsigned long)e[0].tag : 0,
				n > 0 ? (unsigned long)e[0].data : 0);
			exit(2);
		}
		for (size_t k = 0; k < size; k++) {
			if ((unsigned char)s->rbuf[k] != (unsigned char)(seq + k)) {
				fprintf(stderr, "FATAL: byte %zu of message %u is wrong\n", k, seq);
				exit(2);
			}
		}
		got = 1;
	}
}

static void send_to(struct side *s, unsigned char seq)
{
	for (size_t k = 0; k < size; k++)
		s->sbuf[k] = (char)(seq + k);
	sent++;
	if (by_send)
		MUST(fi_tsenddata(s->ep, s->sbuf, size, NULL, (uint64_t)s->rank, s->peer, TAG, &s->send_ctx));
	else
		MUST(fi_tinjectdata(s->ep, s->sbuf, size, (uint64_t)s->rank, s->peer, TAG));
}

/* `iters` round trips from a to b and back. */
static void round_trips(struct side *a, struct side *b, unsigned long iters)
{
	for (unsigned long i = 0; i < iters; i++) {
		unsigned char seq = (unsigned char)i;
		send_to(a, seq);
		reap(b, a, seq);
		post_recv(b);
		send_to(b, (unsigned char)(seq + 1));
		reap(a, b, (unsigned char)(seq + 1));
		post_recv(a);
	}
}

/* What callgrind counts (--toggle-collect=measured): the warm-up is not. */
__attribute__((noinline)) void measured(struct side *a, struct side *b, unsigned long iters)
{
	round_trips(a, b, iters);
}

/* `n` reads of a's CQ while nothing is in flight (-FI_EAGAIN each, each a
 * full poll: the caller reads once before, as the first read after a hit
 * returns without polling, decision 50). */
__attribute__((noinline)) void idle_reads(struct side *a, unsigned long n)
{
	struct fi_cq_tagged_entry e[100];
	for (unsigned long i = 0; i < n; i++) {
		ssize_t r = fi_cq_read(a->cq, e, 100);
		if (r != -FI_EAGAIN) {
			fprintf(stderr, "FATAL: an idle read returned %zd\n", r);
			exit(2);
		}
	}
}

static void open_side(struct fid_domain *domain, struct fid_av *av, struct fi_info *info, struct side *s)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE, .size = 256};
	MUST(fi_endpoint(domain, info, &s->ep, NULL));
	MUST(fi_cq_open(domain, &cq_attr, &s->cq, NULL));
	MUST(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	MUST(fi_ep_bind(s->ep, &av->fid, 0));
	MUST(fi_enable(s->ep));
}

int main(int argc, char **argv)
{
	unsigned long iters = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
	unsigned long idle = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
	const char *threading = getenv("PATH_COST_THREADING");
	int domain_level = threading && strcmp(threading, "domain") == 0;
	const char *send = getenv("PATH_COST_SEND");
	by_send = send && strcmp(send, "tsenddata") == 0;
	size = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
	if (size > MAXSIZE) {
		fprintf(stderr, "path_cost: SIZE is at most %d\n", MAXSIZE);
		return 2;
	}
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
	hints->mode = FI_CONTEXT;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = domain_level ? FI_THREAD_DOMAIN : FI_THREAD_SAFE;
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->tx_attr->op_flags = FI_COMPLETION;
	hints->rx_attr->op_flags = FI_COMPLETION;
	hints->fabric_attr->prov_name = strdup("xfer");
	MUST(fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info));
	if (size > info->tx_attr->inject_size) {
		fprintf(stderr, "path_cost: SIZE is above inject_size %zu\n", info->tx_attr->inject_size);
		return 2;
	}
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &domain, NULL));
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	static struct side a, b;
	open_side(domain, av, info, &a);
	open_side(domain, av, info, &b);
	a.rank = 0;
	b.rank = 1;
	/* fi_av_insert walks names of the endpoint's address length, back to back. */
	char names[128];
	size_t len = 64, len_b = 64;
	MUST(fi_getname(&a.ep->fid, names, &len));
	MUST(fi_getname(&b.ep->fid, names + len, &len_b));
	fi_addr_t addrs[2];
	if (len != len_b || fi_av_insert(av, names, 2, addrs, 0, NULL) != 2) {
		fprintf(stderr, "FATAL: fi_av_insert\n");
		return 2;
	}
	a.peer = addrs[1];
	b.peer = addrs[0];
	post_recv(&a);
	post_recv(&b);
	/* Connect and warm up outside the measured count. */
	round_trips(&a, &b, 1000);
	empty = 0;
	measured(&a, &b, iters);
	printf("path_cost: %lu round trips of %zu B through libfabric over xfer%s, %lu empty reads (%.3f per round "
	       "trip)\n",
	       iters, size, by_send ? " (fi_tsenddata)" : "", empty, (double)empty / (double)iters);
	/* Every send completed, once: the last ones may not have been read yet. */
	for (unsigned long tries = 0; by_send && sends_done < sent && tries < 1000000; tries++) {
		struct fi_cq_tagged_entry e[100];
		struct side *s = tries % 2 ? &b : &a;
		ssize_t n = fi_cq_read(s->cq, e, 100);
		if (n != -FI_EAGAIN && n < 0)
			MUST(n);
		if (n > 0 && drop_sends(s, e, n) > 0) {
			fprintf(stderr, "FATAL: unexpected completion after the round trips\n");
			return 2;
		}
	}
	if (by_send && sends_done != sent) {
		fprintf(stderr, "FATAL: %lu sends, %lu send completions\n", sent, sends_done);
		return 2;
	}
	if (idle > 0) {
		struct fi_cq_tagged_entry e[100];
		(void)fi_cq_read(a.cq, e, 100);
		idle_reads(&a, idle);
		printf("path_cost: %lu idle reads (%s)\n", idle, domain_level ? "FI_THREAD_DOMAIN" : "FI_THREAD_SAFE");
	}
	MUST(fi_cancel(&a.ep->fid, &a.recv_ctx));
	MUST(fi_cancel(&b.ep->fid, &b.recv_ctx));
	MUST(fi_close(&a.ep->fid));
	MUST(fi_close(&b.ep->fid));
	MUST(fi_close(&a.cq->fid));
	MUST(fi_close(&b.cq->fid));
	MUST(fi_close(&av->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
