/*
 * xfer's libfabric provider through libfabric's own API: three RDM endpoints
 * in one process (A and B send, C receives) over xfer's TCP provider.
 * Run with FI_PROVIDER=xfer FI_PROVIDER_PATH=target/<profile> (ofi/tests/c_suite.rs).
 *
 * Covers: fi_av_insert of several names at once, tagged any-source and
 * directed receives (fi_cq_readfrom source addresses), truncation through
 * fi_cq_readerr with both lengths, inject and injectdata, cancel
 * (FI_ECANCELED), FI_PEEK / FI_CLAIM / FI_DISCARD probes (eager and
 * rendezvous messages), RMA (fi_mr_reg, read, write, writedata, inject_write,
 * writemsg; bad key, out of bounds, no right), fi_tsendmsg flags, blocking reads (fi_cq_sread, the FI_GETWAIT
 * fd after fi_trywait), and calls xfer refuses (-FI_ENOSYS,
 * -FI_ENODATA, -FI_EBADFLAGS, -FI_EBUSY).
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "must.h"

/* This suite counts failures and goes on. */
#undef CHECK

static int failures;

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__,       \
				__LINE__, #cond);                          \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			failures++;                                        \
		}                                                          \
	} while (0)

#define NEP 3
#define STASH 64

/* One completion (or error) read out of a CQ, with its source. */
struct got {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
	int err; /* 0, or the positive FI_E* of an error entry */
	size_t olen;
};

struct node {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t addr;
	struct got stash[STASH];
	int n;
};

static struct node nodes[NEP];
/* The nodes progress() reads: `nodes`, or the RMA section's own. */
static struct node *cur = nodes;
static int ncur = NEP;

/* Reads node i's CQ (which drives its endpoint's progress) into its stash. */
static void progress_node(int i)
{
	struct node *nd = &cur[i];
	struct fi_cq_tagged_entry e[8];
	fi_addr_t src[8];
	ssize_t r = fi_cq_readfrom(nd->cq, e, 8, src);
	for (ssize_t k = 0; k < r && nd->n < STASH; k++) {
		nd->stash[nd->n].e = e[k];
		nd->stash[nd->n].src = src[k];
		nd->stash[nd->n].err = 0;
		nd->n++;
	}
	if (r == -FI_EAVAIL && nd->n < STASH) {
		struct fi_cq_err_entry err = {0};
		MUST(fi_cq_readerr(nd->cq, &err, 0));
		struct got *g = &nd->stash[nd->n++];
		memset(g, 0, sizeof(*g));
		g->e.op_context = err.op_context;
		g->e.flags = err.flags;
		g->e.len = err.len;
		g->e.tag = err.tag;
		g->e.data = err.data;
		g->src = FI_ADDR_NOTAVAIL;
		g->err = err.err;
		g->olen = err.olen;
		const char *text = fi_cq_strerror(nd->cq, err.prov_errno, err.err_data, NULL, 0);
		CHECK(text && *text, "fi_cq_strerror gave no text");
	} else if (r < 0 && r != -FI_EAGAIN) {
		fprintf(stderr, "FATAL: fi_cq_readfrom = %zd\n", r);
		exit(2);
	}
}

/* Reads every CQ into the stashes. */
static void progress(void)
{
	for (int i = 0; i < ncur; i++)
		progress_node(i);
}

/* Waits (10 s at most) for the completion of `ctx` on node `i` and takes it. */
static struct got wait_for(int i, void *ctx)
{
	time_t end = time(NULL) + 10;
	struct node *nd = &cur[i];
	while (time(NULL) < end) {
		progress();
		for (int k = 0; k < nd->n; k++) {
			if (nd->stash[k].e.op_context == ctx) {
				struct got g = nd->stash[k];
				memmove(&nd->stash[k], &nd->stash[k + 1],
					(size_t)(nd->n - k - 1) * sizeof(g));
				nd->n--;
				return g;
			}
		}
	}
	fprintf(stderr, "FATAL: no completion for context %p on node %d\n", ctx, i);
	exit(2);
}

/* Progresses a while and checks node `i` got nothing. */
static void expect_nothing(int i, const char *what)
{
	for (int k = 0; k < 200; k++)
		progress();
	CHECK(cur[i].n == 0, "%s: %d unexpected completion(s), first context %p",
	      what, cur[i].n, cur[i].n ? cur[i].stash[0].e.op_context : NULL);
}

static int ctx[80]; /* distinct addresses used as operation contexts */
#define CTX(n) ((void *)&ctx[n])

/* A sender thread: sends after a pause (so the receiver is blocked by then)
 * and drives its own endpoint until the send completes. */
struct sender {
	struct node *from;
	fi_addr_t to;
	uint64_t tag;
	void *context;
	int ok;
};

static void *send_later(void *arg)
{
	struct sender *s = arg;
	struct timespec pause = {.tv_nsec = 200 * 1000 * 1000};
	nanosleep(&pause, NULL);
	if (fi_tsend(s->from->ep, "wake", 5, NULL, s->to, s->tag, s->context))
		return NULL;
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		struct fi_cq_tagged_entry e;
		if (fi_cq_read(s->from->cq, &e, 1) == 1 && e.op_context == s->context) {
			s->ok = 1;
			break;
		}
	}
	return NULL;
}

/* Calls fi_cq_signal on a CQ after 200 ms. */
static void *signal_later(void *cq)
{
	struct timespec pause = {.tv_nsec = 200 * 1000 * 1000};
	nanosleep(&pause, NULL);
	MUST(fi_cq_signal((struct fid_cq *)cq));
	return NULL;
}

/* fi_trecvmsg with probe flags on node `i` (no buffer unless given). */
static ssize_t probe(int i, uint64_t flags, fi_addr_t src, uint64_t tag, void *buf, size_t len, void *context)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct fi_msg_tagged m = {
		.msg_iov = buf ? &iov : NULL, .iov_count = buf ? 1 : 0, .addr = src, .tag = tag, .context = context,
	};
	return fi_trecvmsg(cur[i].ep, &m, flags);
}

/* One peek (with `flags`) on node `i`, and its answer. */
static struct got peek_once(int i, uint64_t flags, fi_addr_t src, uint64_t tag, void *context)
{
	MUST(probe(i, flags, src, tag, NULL, 0, context));
	return wait_for(i, context);
}

/* Peeks (with `flags`) on node `i` until a message matches, 10 s at most:
 * the answer for the first peek that did not report FI_ENOMSG. */
static struct got peek_until(int i, uint64_t flags, fi_addr_t src, uint64_t tag, void *context)
{
	time_t end = time(NULL) + 10;
	while (time(NULL) < end) {
		struct got g = peek_once(i, flags, src, tag, context);
		if (g.err != FI_ENOMSG)
			return g;
	}
	fprintf(stderr, "FATAL: no message for tag %lu came to node %d\n", (unsigned long)tag, i);
	exit(2);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* RMA on its own domain (FI_RMA asked, with FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
 * FI_MR_PROV_KEY): X reads and writes memory Y registered. fi_write, fi_read,
 * fi_writedata (Y's receive CQ gets the data), fi_inject_write, fi_writemsg;
 * a bad key, a range past the region's end and a write into a region
 * registered for remote reads only fail with FI_EACCES at X. */
/* Opens an endpoint with a CQ of its own bound with FI_SELECTIVE_COMPLETION
 * and, when given, counters for FI_SEND (tx) and FI_RECV (rx); enables it and
 * inserts its name into `av`. Returns its address. */
static fi_addr_t open_selective(struct fid_domain *domain, struct fid_av *av, struct fi_info *info,
				struct fid_cntr *tx, struct fid_cntr *rx, struct fid_ep **ep, struct fid_cq **cq)
{
	struct fi_cq_attr attr = {.format = FI_CQ_FORMAT_TAGGED};
	MUST(fi_cq_open(domain, &attr, cq, NULL));
	MUST(fi_endpoint(domain, info, ep, NULL));
	MUST(fi_ep_bind(*ep, &av->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION));
	if (tx)
		MUST(fi_ep_bind(*ep, &tx->fid, FI_SEND));
	if (rx)
		MUST(fi_ep_bind(*ep, &rx->fid, FI_RECV));
	MUST(fi_enable(*ep));
	char name[64];
	size_t len = sizeof(name);
	MUST(fi_getname(&(*ep)->fid, name, &len));
	fi_addr_t addr = FI_ADDR_NOTAVAIL;
	CHECK(fi_av_insert(av, name, 1, &addr, 0, NULL) == 1, "inserting a selective endpoint's name");
	return addr;
}

/* Counters (fi_cntr): an endpoint E bound to a transmit counter (FI_SEND,
 * with an fd wait object) and a receive counter (FI_RECV), and to a CQ with
 * FI_SELECTIVE_COMPLETION, so that sends without FI_COMPLETION show on the
 * counter only. Successes and errors count apart; waits drive progress. */
static void cntr_section(struct fid_domain *domain, struct fid_av *av, struct fi_info *info)
{
	struct node *b = &nodes[1], *c = &nodes[2];
	struct fid_cntr *tx, *rx;
	struct fi_cntr_attr tx_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD};
	struct fi_cntr_attr rx_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE};
	MUST(fi_cntr_open(domain, &tx_attr, &tx, NULL));
	MUST(fi_cntr_open(domain, &rx_attr, &rx, NULL));
	int wfd = -1;
	CHECK(fi_control(&tx->fid, FI_GETWAIT, &wfd) == 0 && wfd >= 0, "counter FI_GETWAIT: %d", wfd);
	struct fid_ep *e;
	MUST(fi_endpoint(domain, info, &e, NULL));
	CHECK(fi_ep_bind(e, &tx->fid, FI_REMOTE_WRITE) == -FI_EINVAL, "a remote counter without FI_RMA_EVENT");
	MUST(fi_close(&e->fid));
	struct fid_cq *ecq;
	fi_addr_t eaddr = open_selective(domain, av, info, tx, rx, &e, &ecq);

	/* Three sends without FI_COMPLETION: counted, not reported on the CQ. */
	char in[3][8] = {{0}};
	for (int k = 0; k < 3; k++)
		MUST(fi_trecv(c->ep, in[k], sizeof(in[k]), NULL, FI_ADDR_UNSPEC, 61, 0, CTX(52 + k)));
	for (int k = 0; k < 3; k++)
		MUST(fi_tsend(e, "cnt", 4, NULL, c->addr, 61, NULL));
	/* fi_cntr_read drives E (which connects to C), progress() the others. */
	for (time_t end = time(NULL) + 10; (fi_cntr_read(tx) < 3 || c->n < 3) && time(NULL) < end;)
		progress();
	for (int k = 0; k < 3; k++)
		CHECK(wait_for(2, CTX(52 + k)).err == 0 && !strcmp(in[k], "cnt"), "counted send %d", k);
	CHECK(fi_cntr_read(tx) == 3 && fi_cntr_readerr(tx) == 0, "send counter %lu (errors %lu)",
	      (unsigned long)fi_cntr_read(tx), (unsigned long)fi_cntr_readerr(tx));
	struct fi_cq_tagged_entry ce;
	CHECK(fi_cq_read(ecq, &ce, 1) == -FI_EAGAIN, "a send without FI_COMPLETION reached the CQ");
	/* An inject counts at once; fi_cntr_wait (driving E alone) sees a send
	 * complete; waiting for more than will come times out. */
	MUST(fi_tinject(e, "inj", 4, c->addr, 62));
	CHECK(fi_cntr_read(tx) == 4, "send counter after an inject: %lu", (unsigned long)fi_cntr_read(tx));
	MUST(fi_tsend(e, "five", 5, NULL, c->addr, 62, NULL));
	CHECK(fi_cntr_wait(tx, 5, 5000) == 0, "fi_cntr_wait for the fifth send");
	CHECK(fi_cntr_wait(tx, 6, 50) == -FI_ETIMEDOUT, "fi_cntr_wait past what will come");
	char sink[2][8];
	MUST(fi_trecv(c->ep, sink[0], 8, NULL, FI_ADDR_UNSPEC, 62, 0, CTX(55)));
	MUST(fi_trecv(c->ep, sink[1], 8, NULL, FI_ADDR_UNSPEC, 62, 0, CTX(56)));
	wait_for(2, CTX(55));
	wait_for(2, CTX(56));

	/* Receives count on the receive counter (and complete on the CQ: they
	 * ask for it); a truncated one counts as an error, which ends a wait
	 * with -FI_EAVAIL. */
	char r[2][8] = {{0}}, tiny[4];
	struct iovec riov[2] = {{r[0], 8}, {r[1], 8}};
	for (int k = 0; k < 2; k++) {
		struct fi_msg_tagged m = {.msg_iov = &riov[k], .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 63,
					  .context = CTX(57 + k)};
		MUST(fi_trecvmsg(e, &m, FI_COMPLETION));
	}
	MUST(fi_tsend(b->ep, "r0", 3, NULL, eaddr, 63, CTX(59)));
	MUST(fi_tsend(b->ep, "r1", 3, NULL, eaddr, 63, CTX(60)));
	/* B connects to E: fi_cntr_read drives E, progress() B. */
	for (time_t end = time(NULL) + 10; fi_cntr_read(rx) < 2 && time(NULL) < end;)
		progress();
	wait_for(1, CTX(59));
	wait_for(1, CTX(60));
	CHECK(fi_cntr_wait(rx, 2, 5000) == 0 && !strcmp(r[0], "r0") && !strcmp(r[1], "r1"), "receive counter: %lu",
	      (unsigned long)fi_cntr_read(rx));
	int on_cq = 0;
	for (int k = 0; k < 100 && on_cq < 2; k++)
		on_cq += fi_cq_read(ecq, &ce, 1) == 1;
	CHECK(on_cq == 2, "receives on E's CQ: %d", on_cq);
	struct iovec tiov = {tiny, sizeof(tiny)};
	struct fi_msg_tagged tm = {.msg_iov = &tiov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 64, .context = CTX(61)};
	MUST(fi_trecvmsg(e, &tm, FI_COMPLETION));
	MUST(fi_tsend(b->ep, "too-long", 9, NULL, eaddr, 64, CTX(62)));
	wait_for(1, CTX(62));
	CHECK(fi_cntr_wait(rx, 3, 5000) == -FI_EAVAIL && fi_cntr_readerr(rx) == 1 && fi_cntr_read(rx) == 2,
	      "truncation on the receive counter: %lu ok, %lu errors", (unsigned long)fi_cntr_read(rx),
	      (unsigned long)fi_cntr_readerr(rx));
	struct fi_cq_err_entry cerr = {0};
	CHECK(fi_cq_read(ecq, &ce, 1) == -FI_EAVAIL && fi_cq_readerr(ecq, &cerr, 0) == 1 && cerr.err == FI_ETRUNC,
	      "the truncation on E's CQ");
	/* A receive without FI_COMPLETION counts too (and reaches no CQ); a
	 * truncated one is reported with its context. */
	char quiet[8] = {0};
	MUST(fi_trecv(e, quiet, sizeof(quiet), NULL, FI_ADDR_UNSPEC, 65, 0, CTX(66)));
	MUST(fi_tsend(b->ep, "q", 2, NULL, eaddr, 65, CTX(67)));
	wait_for(1, CTX(67));
	CHECK(fi_cntr_wait(rx, 3, 5000) == 0 && !strcmp(quiet, "q"), "receive without FI_COMPLETION counted: %lu",
	      (unsigned long)fi_cntr_read(rx));
	CHECK(fi_cq_read(ecq, &ce, 1) == -FI_EAGAIN, "a receive without FI_COMPLETION reached the CQ");
	MUST(fi_trecv(e, tiny, sizeof(tiny), NULL, FI_ADDR_UNSPEC, 66, 0, CTX(68)));
	MUST(fi_tsend(b->ep, "too-long", 9, NULL, eaddr, 66, CTX(69)));
	wait_for(1, CTX(69));
	ssize_t er = -FI_EAGAIN;
	for (time_t end = time(NULL) + 10; er == -FI_EAGAIN && time(NULL) < end;)
		er = fi_cq_read(ecq, &ce, 1);
	memset(&cerr, 0, sizeof(cerr));
	CHECK(er == -FI_EAVAIL && fi_cq_readerr(ecq, &cerr, 0) == 1 && cerr.err == FI_ETRUNC &&
		      cerr.op_context == CTX(68) && fi_cntr_readerr(rx) == 2,
	      "truncated receive without FI_COMPLETION: %zd, err %d, context %p", er, cerr.err, cerr.op_context);

	/* Set and add, for values and errors. */
	MUST(fi_cntr_set(tx, 10));
	MUST(fi_cntr_add(tx, 5));
	MUST(fi_cntr_adderr(tx, 2));
	CHECK(fi_cntr_read(tx) == 15 && fi_cntr_readerr(tx) == 2, "set/add: %lu, %lu", (unsigned long)fi_cntr_read(tx),
	      (unsigned long)fi_cntr_readerr(tx));
	MUST(fi_cntr_seterr(tx, 0));
	CHECK(fi_cntr_readerr(tx) == 0, "seterr");

	CHECK(fi_close(&tx->fid) == -FI_EBUSY, "closing a counter bound to an open endpoint");
	MUST(fi_close(&e->fid));
	MUST(fi_close(&ecq->fid));
	MUST(fi_close(&tx->fid));
	MUST(fi_close(&rx->fid));
}

static char target[4096], readonly[64], big_rma[1 << 16];

/* The xfer provider to run on: XFER_SUITE_DOMAIN (the Soft-RoCE guest sets
 * "verbs"), else the one XFER_PROVIDER forces (make test-shm's "shm"), tcp
 * by default. */
static const char *domain_name(void)
{
	const char *d = getenv("XFER_SUITE_DOMAIN");
	if (!d || !*d)
		d = getenv("XFER_PROVIDER");
	return d && *d ? d : "tcp";
}

static void rma_section(struct fid_fabric *fabric)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED | FI_RMA;
	hints->domain_attr->name = strdup(domain_name());
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("xfer");
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	uint64_t rcaps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	CHECK((info->caps & rcaps) == rcaps, "RMA caps %lx", (unsigned long)info->caps);
	CHECK(info->domain_attr->mr_mode == (FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY), "mr_mode %x",
	      info->domain_attr->mr_mode);
	/* Listing FI_MR_LOCAL gets it (the data calls below then pass their
	 * buffers' fi_mr_desc, which xfer uses: decision 51). */
	fi_freeinfo(info);
	hints->domain_attr->mr_mode |= FI_MR_LOCAL;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(info->domain_attr->mr_mode == (FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_LOCAL),
	      "mr_mode with FI_MR_LOCAL listed: %x", info->domain_attr->mr_mode);
	CHECK(info->tx_attr->rma_iov_limit == 4, "rma_iov_limit %zu", info->tx_attr->rma_iov_limit);
	struct fid_domain *domain;
	struct fid_av *av;
	MUST(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	static struct node rn[2];
	char names[2][64];
	for (int i = 0; i < 2; i++) {
		struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
		MUST(fi_cq_open(domain, &cq_attr, &rn[i].cq, NULL));
		MUST(fi_endpoint(domain, info, &rn[i].ep, NULL));
		MUST(fi_ep_bind(rn[i].ep, &av->fid, 0));
		MUST(fi_ep_bind(rn[i].ep, &rn[i].cq->fid, FI_TRANSMIT | FI_RECV));
		MUST(fi_enable(rn[i].ep));
		size_t len = sizeof(names[i]);
		MUST(fi_getname(&rn[i].ep->fid, names[i], &len));
		CHECK(fi_av_insert(av, names[i], 1, &rn[i].addr, 0, NULL) == 1, "inserting RMA endpoint %d", i);
	}
	cur = rn;
	ncur = 2;
	struct node *x = &rn[0], *y = &rn[1];

	struct fid_mr *mr, *ro, *bad;
	MUST(fi_mr_reg(domain, target, sizeof(target), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	MUST(fi_mr_reg(domain, readonly, sizeof(readonly), FI_REMOTE_READ, 0, 0, 0, &ro, NULL));
	struct iovec two[2] = {{target, 8}, {readonly, 8}};
	CHECK(fi_mr_regv(domain, two, 2, FI_REMOTE_READ, 0, 0, 0, &bad, NULL) == -FI_EINVAL, "fi_mr_regv of 2 segments");
	/* Regions bind counters (every domain's target sees the RMA applied
	 * to it once it asked to: the RDM engine serves it), not endpoints (no
	 * FI_MR_ENDPOINT). */
	{
		struct fid_cntr *k;
		struct fi_cntr_attr k_attr = {.events = FI_CNTR_EVENTS_COMP};
		MUST(fi_cntr_open(domain, &k_attr, &k, NULL));
		int r = fi_mr_bind(mr, &k->fid, FI_REMOTE_WRITE);
		CHECK(r == 0, "fi_mr_bind of a counter on %s = %d", domain_name(), r);
		r = fi_mr_bind(ro, &rn[0].ep->fid, 0);
		CHECK(r == -FI_EINVAL, "fi_mr_bind of an endpoint = %d", r);
		CHECK(fi_mr_enable(ro) == 0, "fi_mr_enable");
		CHECK(fi_close(&k->fid) == -FI_EBUSY, "closing a counter bound to an open region");
		/* A fresh region to bind it to next time: closing this one frees
		 * the counter. */
		MUST(fi_close(&mr->fid));
		MUST(fi_close(&k->fid));
		MUST(fi_mr_reg(domain, target, sizeof(target), FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	}
	uint64_t key = fi_mr_key(mr), base = (uint64_t)(uintptr_t)target;

	/* fi_write, then fi_read of what it wrote, from and into registered
	 * local buffers named by their fi_mr_desc (FI_MR_LOCAL). */
	static char out[1000], back[1000];
	struct fid_mr *lmr;
	MUST(fi_mr_reg(domain, out, sizeof(out), FI_SEND | FI_WRITE, 0, 0, 0, &lmr,
		       NULL));
	struct fid_mr *bmr;
	MUST(fi_mr_reg(domain, back, sizeof(back), FI_RECV | FI_READ, 0, 0, 0, &bmr, NULL));
	void *odesc = fi_mr_desc(lmr), *bdesc = fi_mr_desc(bmr);
	CHECK(odesc && bdesc && odesc != bdesc, "fi_mr_desc: %p %p", odesc, bdesc);
	for (int i = 0; i < 1000; i++)
		out[i] = (char)(i * 7 + 1);
	MUST(fi_write(x->ep, out, sizeof(out), odesc, y->addr, base + 100, key, CTX(34)));
	struct got w = wait_for(0, CTX(34));
	CHECK(w.err == 0 && (w.e.flags & (FI_RMA | FI_WRITE)) == (FI_RMA | FI_WRITE), "fi_write: err %d flags %lx", w.err,
	      (unsigned long)w.e.flags);
	CHECK(!memcmp(target + 100, out, sizeof(out)), "fi_write did not land in the target region");
	MUST(fi_read(x->ep, back, sizeof(back), bdesc, y->addr, base + 100, key, CTX(35)));
	struct got r = wait_for(0, CTX(35));
	CHECK(r.err == 0 && (r.e.flags & (FI_RMA | FI_READ)) == (FI_RMA | FI_READ) && !memcmp(back, out, sizeof(out)),
	      "fi_read: err %d", r.err);
	/* A desc that does not cover the buffer, or is no region at all, is refused. */
	CHECK(fi_write(x->ep, back, 8, odesc, y->addr, base, key, CTX(34)) == -FI_EINVAL, "desc of another region");
	CHECK(fi_write(x->ep, out + 990, 20, odesc, y->addr, base, key, CTX(34)) == -FI_EINVAL, "desc shorter than the buffer");
	CHECK(fi_write(x->ep, out, 8, &av->fid, y->addr, base, key, CTX(34)) == -FI_EINVAL, "an AV as a desc");
	/* Tagged messages with descs: sent from one region, received into another. */
	memset(back, 0, 64);
	MUST(fi_trecv(y->ep, back, 64, bdesc, x->addr, 77, 0, CTX(48)));
	MUST(fi_tsend(x->ep, out, 64, odesc, y->addr, 77, CTX(49)));
	CHECK(wait_for(1, CTX(48)).err == 0 && !memcmp(back, out, 64), "tagged message between registered buffers");
	CHECK(wait_for(0, CTX(49)).err == 0, "tagged send from a registered buffer");

	/* fi_writedata: the target's receive CQ reports the data. */
	MUST(fi_writedata(x->ep, "with-data", 10, NULL, 0xfeed, y->addr, base + 1200, key, CTX(36)));
	CHECK(wait_for(0, CTX(36)).err == 0, "fi_writedata");
	struct got t = wait_for(1, NULL);
	CHECK(t.err == 0 && (t.e.flags & (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA)) == (FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
		      t.e.data == 0xfeed,
	      "target side of fi_writedata: err %d flags %lx data %lx", t.err, (unsigned long)t.e.flags,
	      (unsigned long)t.e.data);
	CHECK(!strcmp(target + 1200, "with-data"), "fi_writedata wrote %s", target + 1200);

	/* fi_inject_write: no completion at all; the bytes land. */
	MUST(fi_inject_write(x->ep, "inj-w", 6, y->addr, base + 2000, key));
	for (time_t end = time(NULL) + 10; time(NULL) < end && strcmp(target + 2000, "inj-w");)
		progress();
	CHECK(!strcmp(target + 2000, "inj-w"), "fi_inject_write did not land");
	expect_nothing(0, "fi_inject_write completions");

	/* fi_writemsg with FI_INJECT: the buffer may be reused at once. */
	char msgbuf[8] = "wmsg";
	struct iovec miov = {msgbuf, 5};
	struct fi_rma_iov rio = {.addr = base + 3000, .len = 5, .key = key};
	struct fi_msg_rma wm = {.msg_iov = &miov, .iov_count = 1, .addr = y->addr, .rma_iov = &rio, .rma_iov_count = 1,
				.context = CTX(37)};
	MUST(fi_writemsg(x->ep, &wm, FI_INJECT | FI_COMPLETION));
	memset(msgbuf, 'x', 5);
	CHECK(wait_for(0, CTX(37)).err == 0 && !strcmp(target + 3000, "wmsg"), "fi_writemsg wrote %s", target + 3000);

	/* What the target refuses: a bad key, past the region's end, a region
	 * that allows remote reads only. Each fails at the initiator. */
	MUST(fi_write(x->ep, out, 16, NULL, y->addr, base, key + 0x1234567, CTX(38)));
	struct got e1 = wait_for(0, CTX(38));
	CHECK(e1.err == FI_EACCES, "bad key: err %d", e1.err);
	MUST(fi_read(x->ep, back, 100, NULL, y->addr, base + sizeof(target) - 10, key, CTX(39)));
	struct got e2 = wait_for(0, CTX(39));
	CHECK(e2.err == FI_EACCES, "read past the region's end: err %d", e2.err);
	MUST(fi_write(x->ep, out, 8, NULL, y->addr, (uint64_t)(uintptr_t)readonly, fi_mr_key(ro), CTX(40)));
	struct got e3 = wait_for(0, CTX(40));
	CHECK(e3.err == FI_EACCES, "write into a read-only region: err %d", e3.err);
	MUST(fi_read(x->ep, back, 8, NULL, y->addr, (uint64_t)(uintptr_t)readonly, fi_mr_key(ro), CTX(41)));
	CHECK(wait_for(0, CTX(41)).err == 0, "read of a read-only region");
	CHECK(fi_inject_write(x->ep, big_rma, sizeof(big_rma), y->addr, base, key) == -FI_EMSGSIZE,
	      "fi_inject_write above inject_size");
	expect_nothing(1, "completions at the target of plain writes and reads");

	/* The one-element I/O vector forms of RMA, messages and tagged messages;
	 * a vector of five is refused. */
	struct iovec wv = {out, 32}, rv = {back, 32};
	MUST(fi_writev(x->ep, &wv, NULL, 1, y->addr, base + 3100, key, CTX(42)));
	CHECK(wait_for(0, CTX(42)).err == 0 && !memcmp(target + 3100, out, 32), "fi_writev");
	memset(back, 0, 32);
	MUST(fi_readv(x->ep, &rv, NULL, 1, y->addr, base + 3100, key, CTX(43)));
	CHECK(wait_for(0, CTX(43)).err == 0 && !memcmp(back, out, 32), "fi_readv");
	char vin[2][16] = {{0}}, smsg[] = "msg-v", stag[] = "tag-v";
	struct iovec rin = {vin[0], 16}, tin = {vin[1], 16}, sm = {smsg, 6}, st = {stag, 6};
	MUST(fi_recvv(y->ep, &rin, NULL, 1, FI_ADDR_UNSPEC, CTX(44)));
	MUST(fi_trecvv(y->ep, &tin, NULL, 1, FI_ADDR_UNSPEC, 9, 0, CTX(45)));
	MUST(fi_sendv(x->ep, &sm, NULL, 1, y->addr, CTX(46)));
	MUST(fi_tsendv(x->ep, &st, NULL, 1, y->addr, 9, CTX(47)));
	CHECK(wait_for(1, CTX(44)).err == 0 && !strcmp(vin[0], "msg-v"), "fi_sendv / fi_recvv");
	CHECK(wait_for(1, CTX(45)).err == 0 && !strcmp(vin[1], "tag-v"), "fi_tsendv / fi_trecvv");
	CHECK(wait_for(0, CTX(46)).err == 0 && wait_for(0, CTX(47)).err == 0, "fi_sendv / fi_tsendv completions");
	struct iovec five[5] = {{out, 2}, {out + 2, 2}, {out + 4, 2}, {out + 6, 2}, {out + 8, 2}};
	/* Messages and RMA take up to iov_limit (4) local buffers
	 * (ofi/tests/c/fi_iov.c, fi_rma.c). */
	CHECK(fi_sendv(x->ep, five, NULL, 5, y->addr, CTX(46)) == -FI_EINVAL, "fi_sendv of 5 elements");
	CHECK(fi_tsendv(x->ep, five, NULL, 5, y->addr, 9, CTX(47)) == -FI_EINVAL, "fi_tsendv of 5 elements");
	CHECK(fi_writev(x->ep, five, NULL, 5, y->addr, base, key, CTX(42)) == -FI_EINVAL, "fi_writev of 5 elements");
	CHECK(fi_readv(x->ep, five, NULL, 5, y->addr, base, key, CTX(43)) == -FI_EINVAL, "fi_readv of 5 elements");
	CHECK(fi_recvv(y->ep, five, NULL, 5, FI_ADDR_UNSPEC, CTX(44)) == -FI_EINVAL, "fi_recvv of 5 elements");
	CHECK(fi_trecvv(y->ep, five, NULL, 5, FI_ADDR_UNSPEC, 9, 0, CTX(45)) == -FI_EINVAL, "fi_trecvv of 5 elements");

	CHECK(fi_close(&domain->fid) == -FI_EBUSY, "closing a domain with registered memory");
	MUST(fi_close(&mr->fid));
	MUST(fi_close(&ro->fid));
	MUST(fi_close(&lmr->fid));
	MUST(fi_close(&bmr->fid));
	for (int i = 0; i < 2; i++) {
		MUST(fi_close(&rn[i].ep->fid));
		MUST(fi_close(&rn[i].cq->fid));
	}
	MUST(fi_close(&av->fid));
	MUST(fi_close(&domain->fid));
	cur = nodes;
	ncur = NEP;
	fi_freeinfo(info);
	fi_freeinfo(hints);
}

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	hints->domain_attr->name = strdup(domain_name());
	hints->fabric_attr->prov_name = strdup("xfer");
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(!strcmp(info->fabric_attr->prov_name, "xfer"), "provider %s", info->fabric_attr->prov_name);
	printf("fi_suite: domain %s\n", info->domain_attr->name);
	CHECK(info->caps & FI_DIRECTED_RECV, "no FI_DIRECTED_RECV");

	/* What xfer cannot do is refused: RMA with local registration only
	 * (xfer's RMA needs FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY). */
	struct fi_info *rma = fi_dupinfo(hints), *none = NULL;
	rma->caps |= FI_RMA;
	rma->domain_attr->mr_mode = FI_MR_LOCAL;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, rma, &none) == -FI_ENODATA, "FI_RMA with FI_MR_LOCAL accepted");
	/* Atomics: offered by every domain (the RDM engine applies them). */
	rma->caps = FI_ATOMIC;
	rma->domain_attr->mr_mode = 0;
	int offered = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, rma, &none);
	CHECK(offered == 0 && (none->caps & FI_ATOMIC), "FI_ATOMIC on %s: %d", info->domain_attr->name, offered);
	fi_freeinfo(none);
	none = NULL;
	fi_freeinfo(rma);
	/* Hints refused at fi_getinfo rather than failing later: an unknown
	 * threading level, 16-byte keys, more error data than an address
	 * (max_err_data 136, FI_SOURCE_ERR's), several remote segments per RMA.
	 * A threading level xfer satisfies is returned as asked. */
	struct fi_info *h2 = fi_dupinfo(hints), *got = NULL;
	h2->domain_attr->threading = (enum fi_threading)99;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA, "unknown threading accepted");
	h2->domain_attr->threading = FI_THREAD_DOMAIN;
	h2->domain_attr->mr_key_size = 16;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA, "16-byte keys accepted");
	h2->domain_attr->mr_key_size = 0;
	h2->domain_attr->max_err_data = 4096;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA, "4096 B of error data accepted");
	h2->domain_attr->max_err_data = 0;
	h2->tx_attr->rma_iov_limit = 5;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &none) == -FI_ENODATA, "rma_iov_limit 5 accepted");
	h2->tx_attr->rma_iov_limit = 0;
	h2->rx_attr->size = 1 << 20;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h2, &got));
	CHECK(got->domain_attr->threading == FI_THREAD_DOMAIN && got->rx_attr->size >= (1 << 20),
	      "threading %d rx size %zu", (int)got->domain_attr->threading, got->rx_attr->size);
	fi_freeinfo(got);
	fi_freeinfo(h2);
	CHECK(!(info->caps & FI_RMA), "FI_RMA offered without being asked for");

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &domain, NULL));
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	MUST(fi_av_open(domain, &av_attr, &av, NULL));

	char names[NEP][64];
	size_t namelen = 0;
	for (int i = 0; i < NEP; i++) {
		/* C, the receiver, blocks on its CQ in the sread test below. */
		struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED,
					     .wait_obj = i == 2 ? FI_WAIT_FD : FI_WAIT_NONE};
		MUST(fi_cq_open(domain, &cq_attr, &nodes[i].cq, NULL));
		MUST(fi_endpoint(domain, info, &nodes[i].ep, NULL));
		CHECK(fi_getname(&nodes[i].ep->fid, names[i], &(size_t){64}) == -FI_EOPBADSTATE,
		      "fi_getname before fi_enable");
		MUST(fi_ep_bind(nodes[i].ep, &av->fid, 0));
		MUST(fi_ep_bind(nodes[i].ep, &nodes[i].cq->fid, FI_TRANSMIT | FI_RECV));
		MUST(fi_enable(nodes[i].ep));
		size_t len = 1;
		CHECK(fi_getname(&nodes[i].ep->fid, names[i], &len) == -FI_ETOOSMALL, "short getname buffer");
		len = sizeof(names[i]);
		MUST(fi_getname(&nodes[i].ep->fid, names[i], &len));
		CHECK(i == 0 || len == namelen, "names of different lengths");
		namelen = len;
	}
	/* All three names in one call: a contiguous array of fixed-size names. */
	char all[NEP * 64];
	for (int i = 0; i < NEP; i++)
		memcpy(all + i * namelen, names[i], namelen);
	fi_addr_t addrs[NEP];
	CHECK(fi_av_insert(av, all, NEP, addrs, 0, NULL) == NEP, "fi_av_insert of %d names", NEP);
	for (int i = 0; i < NEP; i++) {
		nodes[i].addr = addrs[i];
		CHECK(addrs[i] == (fi_addr_t)i, "FI_AV_TABLE index %d is %lu", i, (unsigned long)addrs[i]);
	}
	char straddr[128];
	size_t slen = sizeof(straddr);
	fi_av_straddr(av, names[0], straddr, &slen);
	/* An shm endpoint's name reads fi_xfer_shm:// and its bytes in hex. */
	const char *prefix = strcmp(domain_name(), "shm") ? "xfer://" : "fi_xfer_shm://";
	CHECK(!strncmp(straddr, prefix, strlen(prefix)), "fi_av_straddr: %s", straddr);
	struct node *a = &nodes[0], *b = &nodes[1], *c = &nodes[2];
	(void)a;

	/* Directed and any-source tagged receives: A's message may only take the
	 * any-source receive, B's takes the one directed at B. */
	char r1[16] = {0}, r2[16] = {0};
	MUST(fi_trecv(c->ep, r1, sizeof(r1), NULL, b->addr, 7, 0, CTX(1)));
	MUST(fi_trecv(c->ep, r2, sizeof(r2), NULL, FI_ADDR_UNSPEC, 7, 0, CTX(2)));
	MUST(fi_tsend(nodes[0].ep, "from-a", 7, NULL, c->addr, 7, CTX(3)));
	wait_for(0, CTX(3));
	MUST(fi_tsend(b->ep, "from-b", 7, NULL, c->addr, 7, CTX(4)));
	wait_for(1, CTX(4));
	struct got g1 = wait_for(2, CTX(1)), g2 = wait_for(2, CTX(2));
	CHECK(g1.err == 0 && !strcmp(r1, "from-b") && g1.src == b->addr, "directed: %s from %lu", r1, (unsigned long)g1.src);
	CHECK(g2.err == 0 && !strcmp(r2, "from-a") && g2.src == nodes[0].addr, "any-source: %s from %lu", r2, (unsigned long)g2.src);
	CHECK(g1.e.tag == 7 && g1.e.len == 7 && (g1.e.flags & (FI_RECV | FI_TAGGED)) == (FI_RECV | FI_TAGGED),
	      "tag %lu len %zu flags %lx", (unsigned long)g1.e.tag, g1.e.len, (unsigned long)g1.e.flags);

	/* Tag ignore mask: tag 0x1234 matches 0x1200 with the low byte ignored. */
	char r3[8] = {0};
	MUST(fi_trecv(c->ep, r3, sizeof(r3), NULL, FI_ADDR_UNSPEC, 0x1200, 0xff, CTX(5)));
	MUST(fi_tsend(b->ep, "mask", 5, NULL, c->addr, 0x1234, CTX(6)));
	wait_for(1, CTX(6));
	struct got g3 = wait_for(2, CTX(5));
	CHECK(g3.err == 0 && g3.e.tag == 0x1234 && !strcmp(r3, "mask"), "ignore mask: tag %lx", (unsigned long)g3.e.tag);

	/* Truncation: 10 bytes into 4, reported with both lengths, nothing past
	 * the buffer written. */
	char small[8];
	memset(small, '#', sizeof(small));
	MUST(fi_trecv(c->ep, small, 4, NULL, FI_ADDR_UNSPEC, 9, 0, CTX(7)));
	MUST(fi_tsend(nodes[0].ep, "0123456789", 10, NULL, c->addr, 9, CTX(8)));
	wait_for(0, CTX(8));
	struct got g4 = wait_for(2, CTX(7));
	CHECK(g4.err == FI_ETRUNC, "truncation err %d", g4.err);
	CHECK(g4.e.len == 4 && g4.olen == 6, "truncation len %zu olen %zu", g4.e.len, g4.olen);
	CHECK(!memcmp(small, "0123####", 8), "truncation wrote %.8s", small);

	/* Inject: no completion at the sender; injectdata carries immediate data. */
	char r4[8] = {0}, r5[8] = {0};
	MUST(fi_recv(c->ep, r4, sizeof(r4), NULL, FI_ADDR_UNSPEC, CTX(9)));
	MUST(fi_inject(b->ep, "inj", 4, c->addr));
	struct got g5 = wait_for(2, CTX(9));
	CHECK(g5.err == 0 && !strcmp(r4, "inj") && g5.src == b->addr, "inject: %s", r4);
	MUST(fi_trecv(c->ep, r5, sizeof(r5), NULL, FI_ADDR_UNSPEC, 11, 0, CTX(10)));
	MUST(fi_tinjectdata(b->ep, "tid", 4, 0xabcdef, c->addr, 11));
	struct got g6 = wait_for(2, CTX(10));
	CHECK(g6.err == 0 && (g6.e.flags & FI_REMOTE_CQ_DATA) && g6.e.data == 0xabcdef, "injectdata: data %lx flags %lx",
	      (unsigned long)g6.e.data, (unsigned long)g6.e.flags);
	char big[8192] = {0};
	CHECK(fi_inject(b->ep, big, sizeof(big), c->addr) == -FI_EMSGSIZE, "inject above inject_size");
	expect_nothing(1, "inject completions at the sender");

	/* A read that emptied the endpoint's queue is followed by one that does
	 * not poll (-FI_EAGAIN at once: Open MPI reads until then after every
	 * hit); the read after that polls again and finds what came meanwhile. */
	char d1[8] = {0}, d2[8] = {0};
	MUST(fi_trecv(b->ep, d1, sizeof(d1), NULL, FI_ADDR_UNSPEC, 51, 0, CTX(50)));
	MUST(fi_trecv(b->ep, d2, sizeof(d2), NULL, FI_ADDR_UNSPEC, 52, 0, CTX(51)));
	MUST(fi_tinject(nodes[0].ep, "d1", 3, b->addr, 51));
	struct fi_cq_tagged_entry de[8];
	ssize_t dn = -FI_EAGAIN;
	for (time_t end = time(NULL) + 10; dn == -FI_EAGAIN && time(NULL) < end;) {
		dn = fi_cq_read(b->cq, de, 8);
		if (dn == -FI_EAGAIN)
			progress_node(0); /* A connects to B */
	}
	CHECK(dn == 1 && de[0].op_context == CTX(50) && !strcmp(d1, "d1"), "first message: %zd", dn);
	MUST(fi_tinject(nodes[0].ep, "d2", 3, b->addr, 52));
	CHECK(fi_cq_read(b->cq, de, 8) == -FI_EAGAIN, "the read right after a draining one polled");
	CHECK(wait_for(1, CTX(51)).err == 0 && !strcmp(d2, "d2"), "second message: %s", d2);

	/* fi_getopt / fi_setopt: FI_OPT_CM_DATA_SIZE is 0 (no connection
	 * management on RDM) and read-only; FI_OPT_MIN_MULTI_RECV belongs to
	 * FI_MULTI_RECV, which xfer does not offer: -FI_ENOPROTOOPT. */
	size_t optval = 99, optlen = sizeof(optval);
	CHECK(fi_getopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &optval, &optlen) == 0 && optval == 0 &&
		      optlen == sizeof(size_t),
	      "FI_OPT_CM_DATA_SIZE: %zu (%zu bytes)", optval, optlen);
	optlen = 1;
	CHECK(fi_getopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &optval, &optlen) == -FI_ETOOSMALL &&
		      optlen == sizeof(size_t),
	      "FI_OPT_CM_DATA_SIZE into one byte");
	optlen = sizeof(optval);
	CHECK(fi_setopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &optval, optlen) == -FI_ENOPROTOOPT,
	      "setting FI_OPT_CM_DATA_SIZE");
	CHECK(fi_getopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &optval, &optlen) == -FI_ENOPROTOOPT,
	      "getting FI_OPT_MIN_MULTI_RECV");
	CHECK(fi_setopt(&c->ep->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &optval, optlen) == -FI_ENOPROTOOPT,
	      "setting FI_OPT_MIN_MULTI_RECV");

	/* Cancel: the receive completes with FI_ECANCELED; a second cancel finds nothing. */
	char r6[8];
	MUST(fi_trecv(c->ep, r6, sizeof(r6), NULL, FI_ADDR_UNSPEC, 99, 0, CTX(11)));
	CHECK(fi_cancel(&c->ep->fid, CTX(11)) == 0, "fi_cancel");
	struct got g7 = wait_for(2, CTX(11));
	CHECK(g7.err == FI_ECANCELED, "cancel err %d", g7.err);
	CHECK(fi_cancel(&c->ep->fid, CTX(11)) == -FI_ENOENT, "second fi_cancel");

	/* FI_PEEK, FI_CLAIM, FI_DISCARD (Open MPI's MPI_Iprobe, MPI_Improbe and
	 * MPI_Imrecv). A peek that finds nothing reports FI_ENOMSG through
	 * fi_cq_readerr; one that finds a message reports its length, tag, data
	 * and source without receiving it. */
	struct got p0 = peek_once(2, FI_PEEK | FI_COMPLETION, FI_ADDR_UNSPEC, 41, CTX(24));
	CHECK(p0.err == FI_ENOMSG && p0.e.tag == 41, "peek with nothing there: err %d", p0.err);
	MUST(fi_tsenddata(b->ep, "peek-me", 8, NULL, 5, c->addr, 41, CTX(25)));
	wait_for(1, CTX(25));
	struct got p1 = peek_until(2, FI_PEEK | FI_COMPLETION, FI_ADDR_UNSPEC, 41, CTX(24));
	CHECK(p1.err == 0 && p1.e.len == 8 && p1.e.tag == 41 && p1.src == b->addr && p1.e.data == 5 &&
		      (p1.e.flags & (FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA)) == (FI_TAGGED | FI_RECV | FI_REMOTE_CQ_DATA),
	      "peek: err %d len %zu tag %lu src %lu data %lu", p1.err, p1.e.len, (unsigned long)p1.e.tag,
	      (unsigned long)p1.src, (unsigned long)p1.e.data);
	struct got p2 = peek_once(2, FI_PEEK, a->addr, 41, CTX(24));
	CHECK(p2.err == FI_ENOMSG, "a peek directed at A found B's message: err %d", p2.err);
	/* Claim it: a receive posted now does not take it; the claiming receive does. */
	struct got p3 = peek_until(2, FI_PEEK | FI_CLAIM, b->addr, 41, CTX(26));
	CHECK(p3.err == 0 && p3.e.len == 8 && p3.src == b->addr, "peek|claim: err %d len %zu", p3.err, p3.e.len);
	char r13[16] = {0}, r14[16] = {0};
	MUST(fi_trecv(c->ep, r13, sizeof(r13), NULL, FI_ADDR_UNSPEC, 41, 0, CTX(27)));
	expect_nothing(2, "a receive matched a claimed message");
	CHECK(fi_cancel(&c->ep->fid, CTX(27)) == 0, "cancelling the receive");
	CHECK(wait_for(2, CTX(27)).err == FI_ECANCELED, "cancelled receive");
	MUST(probe(2, FI_CLAIM, FI_ADDR_UNSPEC, 41, r14, sizeof(r14), CTX(26)));
	struct got p4 = wait_for(2, CTX(26));
	CHECK(p4.err == 0 && p4.e.len == 8 && !strcmp(r14, "peek-me") && p4.e.data == 5 && p4.src == b->addr,
	      "claimed receive: err %d %s", p4.err, r14);
	CHECK(probe(2, FI_CLAIM, FI_ADDR_UNSPEC, 41, r14, sizeof(r14), CTX(26)) == -FI_EINVAL, "claiming twice");
	CHECK(probe(2, FI_DISCARD, FI_ADDR_UNSPEC, 41, NULL, 0, CTX(26)) == -FI_EBADFLAGS, "FI_DISCARD alone");
	/* Claim then discard a rendezvous message: the sender's send completes,
	 * the receiver's discard reports length 0, and the next message with the
	 * tag is the one a receive gets. */
	static char huge[1 << 20];
	memset(huge, 'h', sizeof(huge));
	MUST(fi_tsend(nodes[0].ep, huge, sizeof(huge), NULL, c->addr, 42, CTX(28)));
	struct got p5 = peek_until(2, FI_PEEK | FI_CLAIM, FI_ADDR_UNSPEC, 42, CTX(29));
	CHECK(p5.err == 0 && p5.e.len == sizeof(huge) && p5.src == nodes[0].addr, "rendezvous peek: len %zu", p5.e.len);
	MUST(probe(2, FI_CLAIM | FI_DISCARD, FI_ADDR_UNSPEC, 42, NULL, 0, CTX(29)));
	struct got p6 = wait_for(2, CTX(29));
	CHECK(p6.err == 0 && p6.e.len == 0 && p6.e.tag == 42, "claim|discard: err %d len %zu", p6.err, p6.e.len);
	CHECK(wait_for(0, CTX(28)).err == 0, "the discarded rendezvous send did not complete");
	/* FI_PEEK | FI_DISCARD: found, reported, dropped. */
	MUST(fi_tsend(b->ep, "gone", 5, NULL, c->addr, 42, CTX(30)));
	wait_for(1, CTX(30));
	struct got p7 = peek_until(2, FI_PEEK | FI_DISCARD, FI_ADDR_UNSPEC, 42, CTX(31));
	CHECK(p7.err == 0 && p7.e.len == 5 && p7.src == b->addr, "peek|discard: err %d len %zu", p7.err, p7.e.len);
	MUST(fi_tsend(b->ep, "after", 6, NULL, c->addr, 42, CTX(32)));
	wait_for(1, CTX(32));
	char r15[16] = {0};
	MUST(fi_trecv(c->ep, r15, sizeof(r15), NULL, FI_ADDR_UNSPEC, 42, 0, CTX(33)));
	struct got p8 = wait_for(2, CTX(33));
	CHECK(p8.err == 0 && !strcmp(r15, "after"), "after the discards a receive got %s", r15);
	expect_nothing(2, "completions of discarded messages");

	/* Blocking reads: fi_cq_sread times out with -FI_EAGAIN when nothing comes,
	 * and returns the entry another thread's message completes; the CQ's wait
	 * fd (FI_GETWAIT) becomes readable once fi_trywait said it may be waited on. */
	struct fi_cq_tagged_entry te;
	double t0 = now();
	CHECK(fi_cq_sread(c->cq, &te, 1, NULL, 100) == -FI_EAGAIN, "sread with nothing to read");
	CHECK(now() - t0 >= 0.09, "sread returned after %.3f s, before its 100 ms timeout", now() - t0);
	char r9[8] = {0};
	MUST(fi_trecv(c->ep, r9, sizeof(r9), NULL, FI_ADDR_UNSPEC, 21, 0, CTX(16)));
	struct sender s1 = {.from = b, .to = c->addr, .tag = 21, .context = CTX(17)};
	pthread_t th;
	pthread_create(&th, NULL, send_later, &s1);
	ssize_t sr = fi_cq_sread(c->cq, &te, 1, NULL, 10000);
	pthread_join(th, NULL);
	CHECK(s1.ok, "sender thread's send did not complete");
	CHECK(sr == 1 && te.op_context == CTX(16) && !strcmp(r9, "wake"), "sread: %zd, %s", sr, r9);
	int fd = -1;
	CHECK(fi_control(&c->cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0, "FI_GETWAIT: fd %d", fd);
	char r10[8] = {0};
	MUST(fi_trecv(c->ep, r10, sizeof(r10), NULL, FI_ADDR_UNSPEC, 22, 0, CTX(18)));
	struct fid *fids[1] = {&c->cq->fid};
	CHECK(fi_trywait(fabric, fids, 1) == 0, "fi_trywait on an empty CQ");
	struct sender s2 = {.from = b, .to = c->addr, .tag = 22, .context = CTX(19)};
	pthread_create(&th, NULL, send_later, &s2);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int pr = poll(&pfd, 1, 10000);
	CHECK(pr == 1, "the wait fd did not become readable: poll = %d", pr);
	/* The sender thread reads B's CQ itself: join it before progress() does. */
	pthread_join(th, NULL);
	struct got g10 = wait_for(2, CTX(18));
	CHECK(s2.ok && g10.err == 0 && !strcmp(r10, "wake"), "fd wait: %s", r10);
	/* fi_cq_signal: a thread blocked in fi_cq_sread returns -FI_ECANCELED
	 * (not the timeout's -FI_EAGAIN); a signal with nobody blocked ends the
	 * next sread that finds nothing. */
	pthread_create(&th, NULL, signal_later, c->cq);
	ssize_t sg = fi_cq_sread(c->cq, &te, 1, NULL, 10000);
	pthread_join(th, NULL);
	CHECK(sg == -FI_ECANCELED, "sread woken by fi_cq_signal: %zd", sg);
	MUST(fi_cq_signal(c->cq));
	CHECK(fi_cq_sread(c->cq, &te, 1, NULL, 10000) == -FI_ECANCELED, "sread after an earlier fi_cq_signal");
	CHECK(fi_cq_sread(c->cq, &te, 1, NULL, 50) == -FI_EAGAIN, "the signal is consumed once");

	/* FI_SELECTIVE_COMPLETION (as Open MPI binds its CQ): a send without
	 * FI_COMPLETION reports nothing; a receive must ask for its completion,
	 * since every xfer receive completes. */
	struct fid_ep *d;
	struct fid_cq *dcq;
	fi_addr_t daddr = open_selective(domain, av, info, NULL, NULL, &d, &dcq);
	char r11[8] = {0}, r12[8] = {0}, sel[8] = "sel";
	struct iovec riov = {.iov_base = r11, .iov_len = sizeof(r11)};
	struct fi_msg_tagged rm = {.msg_iov = &riov, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .tag = 31, .context = CTX(20)};
	MUST(fi_trecvmsg(d, &rm, FI_COMPLETION));
	MUST(fi_trecv(c->ep, r12, sizeof(r12), NULL, FI_ADDR_UNSPEC, 32, 0, CTX(21)));
	struct iovec siov = {.iov_base = sel, .iov_len = 4};
	struct fi_msg_tagged sm = {.msg_iov = &siov, .iov_count = 1, .addr = c->addr, .tag = 32, .context = CTX(22)};
	MUST(fi_tsendmsg(d, &sm, 0));
	MUST(fi_tsend(b->ep, "to-d", 5, NULL, daddr, 31, CTX(23)));
	int d_recv = 0, d_send = 0;
	for (time_t end = time(NULL) + 10; time(NULL) < end && (!d_recv || nodes[2].n == 0);) {
		struct fi_cq_tagged_entry de;
		if (fi_cq_read(dcq, &de, 1) == 1) {
			d_recv += de.op_context == CTX(20);
			d_send += de.op_context == CTX(22);
		}
		progress();
	}
	struct got g11 = wait_for(2, CTX(21));
	wait_for(1, CTX(23));
	for (int k = 0; k < 100; k++) {
		struct fi_cq_tagged_entry de;
		if (fi_cq_read(dcq, &de, 1) == 1)
			d_send += de.op_context == CTX(22);
	}
	CHECK(d_recv == 1 && !strcmp(r11, "to-d"), "selective receive: %d completion(s), %s", d_recv, r11);
	CHECK(d_send == 0, "a send without FI_COMPLETION completed");
	CHECK(g11.err == 0 && !strcmp(r12, "sel"), "selective send delivered %s", r12);
	/* A receive without FI_COMPLETION: the message lands, nothing is
	 * reported; cancelled, it reports FI_ECANCELED with its own context
	 * (errors are always reported). */
	char r16[8] = {0}, r17[8];
	MUST(fi_trecv(d, r16, sizeof(r16), NULL, FI_ADDR_UNSPEC, 33, 0, CTX(63)));
	MUST(fi_tsend(b->ep, "quiet", 6, NULL, daddr, 33, CTX(64)));
	int d_quiet = 0;
	for (time_t end = time(NULL) + 10; time(NULL) < end && strcmp(r16, "quiet");) {
		struct fi_cq_tagged_entry de;
		if (fi_cq_read(dcq, &de, 1) == 1)
			d_quiet++;
		progress();
	}
	wait_for(1, CTX(64));
	for (int k = 0; k < 100; k++) {
		struct fi_cq_tagged_entry de;
		if (fi_cq_read(dcq, &de, 1) == 1)
			d_quiet++;
	}
	CHECK(!strcmp(r16, "quiet") && d_quiet == 0, "receive without FI_COMPLETION: %s, %d completion(s)", r16, d_quiet);
	MUST(fi_trecv(d, r17, sizeof(r17), NULL, FI_ADDR_UNSPEC, 34, 0, CTX(65)));
	CHECK(fi_cancel(&d->fid, CTX(65)) == 0, "cancelling a receive without FI_COMPLETION");
	struct fi_cq_err_entry dce = {0};
	struct fi_cq_tagged_entry dte;
	ssize_t dr = -FI_EAGAIN;
	for (int k = 0; k < 1000 && dr == -FI_EAGAIN; k++)
		dr = fi_cq_read(dcq, &dte, 1);
	CHECK(dr == -FI_EAVAIL && fi_cq_readerr(dcq, &dce, 0) == 1 && dce.err == FI_ECANCELED &&
		      dce.op_context == CTX(65),
	      "its cancellation: %zd, err %d, context %p", dr, dce.err, dce.op_context);
	MUST(fi_close(&d->fid));
	MUST(fi_close(&dcq->fid));

	/* Unexpected message: sent before its receive is posted. */
	char r7[8] = {0};
	MUST(fi_send(nodes[0].ep, "late", 5, NULL, c->addr, CTX(12)));
	wait_for(0, CTX(12));
	for (int k = 0; k < 100; k++)
		progress();
	MUST(fi_recv(c->ep, r7, sizeof(r7), NULL, FI_ADDR_UNSPEC, CTX(13)));
	struct got g8 = wait_for(2, CTX(13));
	CHECK(g8.err == 0 && !strcmp(r7, "late"), "unexpected message: %s", r7);

	/* *msg calls: FI_INJECT copies and still completes, FI_REMOTE_CQ_DATA
	 * carries the data; FI_DELIVERY_COMPLETE is honoured (fi_complete.c
	 * checks when it completes), FI_MATCH_COMPLETE refused, not claimed. */
	char r8[8] = {0}, sbuf[8] = "msg";
	struct iovec iov = {.iov_base = sbuf, .iov_len = 4};
	struct fi_msg_tagged tm = {
		.msg_iov = &iov, .iov_count = 1, .addr = c->addr, .tag = 12, .context = CTX(14), .data = 77,
	};
	MUST(fi_trecv(c->ep, r8, sizeof(r8), NULL, FI_ADDR_UNSPEC, 12, 0, CTX(15)));
	MUST(fi_tsendmsg(b->ep, &tm, FI_INJECT | FI_REMOTE_CQ_DATA | FI_COMPLETION));
	memset(sbuf, 'x', 4);
	wait_for(1, CTX(14));
	struct got g9 = wait_for(2, CTX(15));
	CHECK(g9.err == 0 && !strcmp(r8, "msg") && g9.e.data == 77 && (g9.e.flags & FI_REMOTE_CQ_DATA),
	      "tsendmsg: %s data %lu", r8, (unsigned long)g9.e.data);
	MUST(fi_trecv(c->ep, r8, sizeof(r8), NULL, FI_ADDR_UNSPEC, 12, 0, CTX(15)));
	MUST(fi_tsendmsg(b->ep, &tm, FI_DELIVERY_COMPLETE | FI_COMPLETION));
	CHECK(wait_for(1, CTX(14)).err == 0, "delivery-complete tsendmsg");
	CHECK(wait_for(2, CTX(15)).err == 0 && !strcmp(r8, "xxxx"), "delivery-complete message: %s", r8);
	CHECK(fi_tsendmsg(b->ep, &tm, FI_MATCH_COMPLETE) == -FI_EBADFLAGS, "FI_MATCH_COMPLETE accepted");

	/* What xfer does not offer returns -FI_ENOSYS, what the endpoint was not
	 * opened for -FI_EOPNOTSUPP; close order is enforced. */
	CHECK(fi_write(c->ep, big, 8, NULL, a->addr, 0, 0, NULL) == -FI_EOPNOTSUPP, "fi_write without FI_RMA");
	cntr_section(domain, av, info);
	CHECK(fi_close(&domain->fid) == -FI_EBUSY, "closing a domain in use");
	CHECK(fi_close(&c->cq->fid) == -FI_EBUSY, "closing a bound CQ");

	rma_section(fabric);

	for (int i = 0; i < NEP; i++) {
		MUST(fi_close(&nodes[i].ep->fid));
		MUST(fi_close(&nodes[i].cq->fid));
	}
	MUST(fi_close(&av->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("fi_suite: all checks passed\n");
	return 0;
}
