/* Event queues and waiting, as libfabric programs use them, checked the
 * same way over any provider (FI_PROVIDER selects it; the tests run it
 * over xfer and over libfabric's tcp). One process, three endpoints A, B, C
 * of one domain; A sends, B and C receive.
 * - EQ with FI_WAIT_FD: fi_eq_write of an fi_eq_entry, FI_GETWAIT's fd
 *   readable with an event and not after it was read and fi_trywait, fi_eq_read with FI_PEEK then
 *   for real, -FI_EAGAIN when empty, fi_eq_sread timing out and woken by
 *   another thread's fi_eq_write;
 * - wait set: B's CQ opened with FI_WAIT_SET; fi_wait times out with
 *   nothing, returns 0 once B's message arrived, and the CQ then has it;
 * - poll set: fi_poll of B's CQ reports nothing, then its context once a
 *   message arrived; fi_poll_del;
 * - counter with FI_WAIT_FD on C's receives: fi_trywait, then poll() on
 *   its FI_GETWAIT fd until the count moves.
 * Prints "all waits checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "must.h"
#include "drive.h"

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int r = poll(&p, 1, ms);
	CHECK(r >= 0, "poll");
	return r;
}

static struct fid_eq *eq;
static int marker;

static void *late_writer(void *arg)
{
	struct fi_eq_entry e = {.fid = NULL, .context = &marker, .data = 7};
	(void)arg;
	MUST(fi_eq_write(eq, FI_NOTIFY, &e, sizeof(e), 0));
	return NULL;
}

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t addr;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_av *av;
static struct fid_mr *mr;
static void *desc;
static char buf[6][64];

static void open_side(struct side *s, struct fi_cq_attr *cq_attr, void *cq_ctx, struct fid_cntr *rx_cntr)
{
	char name[256];
	size_t len = sizeof(name);
	MUST(fi_cq_open(domain, cq_attr, &s->cq, cq_ctx));
	MUST(fi_endpoint(domain, info, &s->ep, NULL));
	MUST(fi_ep_bind(s->ep, &av->fid, 0));
	MUST(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	if (rx_cntr)
		MUST(fi_ep_bind(s->ep, &rx_cntr->fid, FI_RECV));
	MUST(fi_enable(s->ep));
	MUST(fi_getname(&s->ep->fid, name, &len));
	CHECK(fi_av_insert(av, name, 1, &s->addr, 0, NULL) == 1, "fi_av_insert");
}

static void close_side(struct side *s)
{
	MUST(fi_close(&s->ep->fid));
	MUST(fi_close(&s->cq->fid));
}

/* Drains A's CQ (its sends' completions; with manual progress also what
 * moves its connections along). */
static void drive(struct side *a)
{
	struct fi_cq_entry e[4];
	ssize_t r = fi_cq_read(a->cq, e, 4);
	CHECK(r > 0 || r == -FI_EAGAIN, "fi_cq_read on A = %zd", r);
}

static void send_to(struct side *a, struct side *to, int slot)
{
	snprintf(buf[slot], sizeof(buf[slot]), "to %d", slot);
	POST_DRIVING(fi_send(a->ep, buf[slot], sizeof(buf[slot]), desc, to->addr, NULL), a->cq, a->cq);
}

/* A first message from A to `to`, reading both CQs until it arrived: sets
 * up the connection (as fabtests' first exchange does) with progress on
 * both sides, so that what follows depends on the wait being tested. */
static void warm(struct side *a, struct side *to)
{
	struct fi_cq_entry e;
	static int ctx;
	MUST(fi_recv(to->ep, buf[5], sizeof(buf[5]), desc, FI_ADDR_UNSPEC, &ctx));
	strcpy(buf[4], "warm");
	double end = now() + WAIT_SEC;
	ssize_t s;
	while ((s = fi_send(a->ep, buf[4], 5, desc, to->addr, NULL)) == -FI_EAGAIN) {
		CHECK(fi_cq_read(to->cq, &e, 1) == -FI_EAGAIN, "a completion before the warm-up send");
		drive(a);
		CHECK(now() < end, "warm-up send refused");
	}
	MUST(s);
	next_completion(to->cq, a->cq, &e, NULL);
	CHECK(e.op_context == &ctx, "warm-up completion %p", e.op_context);
}

int main(void)
{
	struct fi_info *h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s\n", info->fabric_attr->prov_name);
	open_domain(info, buf, sizeof(buf), &fabric, &domain, &mr, &desc);

	/* The event queue. */
	struct fi_eq_attr eq_attr = {.size = 16, .wait_obj = FI_WAIT_FD};
	struct fi_eq_entry in = {.fid = &fabric->fid, .context = &marker, .data = 42}, out;
	uint32_t event = 0;
	int fd = -1;
	MUST(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	MUST(fi_control(&eq->fid, FI_GETWAIT, &fd));
	CHECK(fd >= 0 && readable(fd, 0) == 0, "EQ fd readable while empty");
	CHECK(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0) == sizeof(in), "fi_eq_write");
	CHECK(readable(fd, 0) == 1, "EQ fd not readable with an event");
	memset(&out, 0, sizeof(out));
	CHECK(fi_eq_read(eq, &event, &out, sizeof(out), FI_PEEK) == sizeof(out), "fi_eq_read FI_PEEK");
	CHECK(event == FI_NOTIFY && out.context == &marker && out.data == 42, "peeked event");
	memset(&out, 0, sizeof(out));
	CHECK(fi_eq_read(eq, &event, &out, sizeof(out), 0) == sizeof(out), "fi_eq_read");
	CHECK(event == FI_NOTIFY && out.context == &marker && out.data == 42 && out.fid == &fabric->fid, "event");
	CHECK(fi_eq_read(eq, &event, &out, sizeof(out), 0) == -FI_EAGAIN, "a second read found something");
	{
		struct fid *f = &eq->fid;
		CHECK(fi_trywait(fabric, &f, 1) == 0, "fi_trywait on the empty EQ");
		CHECK(readable(fd, 0) == 0, "EQ fd readable after the event was read and fi_trywait");
	}
	ssize_t r = fi_eq_sread(eq, &event, &out, sizeof(out), 100, 0);
	CHECK(r == -FI_EAGAIN || r == -FI_ETIMEDOUT, "fi_eq_sread on an empty EQ = %zd", r);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, late_writer, NULL) == 0, "pthread_create");
	memset(&out, 0, sizeof(out));
	CHECK(fi_eq_sread(eq, &event, &out, sizeof(out), WAIT_SEC * 1000, 0) == sizeof(out), "fi_eq_sread");
	CHECK(event == FI_NOTIFY && out.data == 7, "event from the other thread");
	pthread_join(t, NULL);
	MUST(fi_close(&eq->fid));
	printf("event queue checked\n");

	/* Endpoints: A plain, B's CQ in a wait set, C with a counter. */
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_wait_attr wait_attr = {.wait_obj = FI_WAIT_UNSPEC};
	struct fid_wait *ws;
	struct fi_cq_attr plain = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_NONE};
	struct fi_cq_attr in_set = {.format = FI_CQ_FORMAT_CONTEXT, .wait_obj = FI_WAIT_SET};
	struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_FD};
	struct fid_cntr *cntr;
	struct side a, b, c;
	static int b_ctx;
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	MUST(fi_wait_open(fabric, &wait_attr, &ws));
	in_set.wait_set = ws;
	MUST(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));
	open_side(&a, &plain, NULL, NULL);
	open_side(&b, &in_set, &b_ctx, NULL);
	open_side(&c, &plain, NULL, cntr);

	warm(&a, &b);
	warm(&a, &c);
	CHECK(fi_cntr_read(cntr) == 1, "warm-up receive not counted");

	/* Wait set. */
	struct fi_cq_entry ce;
	r = fi_wait(ws, 50);
	CHECK(r == -FI_ETIMEDOUT, "fi_wait with nothing = %zd", r);
	MUST(fi_recv(b.ep, buf[1], sizeof(buf[1]), desc, FI_ADDR_UNSPEC, &b_ctx));
	send_to(&a, &b, 0);
	double end = now() + WAIT_SEC;
	while ((r = fi_wait(ws, 10)) == -FI_ETIMEDOUT) {
		drive(&a);
		CHECK(now() < end, "fi_wait never returned 0");
	}
	CHECK(r == 0, "fi_wait = %zd", r);
	end = now() + WAIT_SEC;
	while ((r = fi_cq_read(b.cq, &ce, 1)) == -FI_EAGAIN)
		CHECK(now() < end, "fi_wait returned 0 but B's CQ stays empty");
	CHECK(r == 1 && ce.op_context == &b_ctx && !strcmp(buf[1], "to 0"), "B's receive");
	printf("wait set checked\n");

	/* Poll set. */
	struct fi_poll_attr poll_attr = {0};
	struct fid_poll *ps;
	void *ctxs[4];
	MUST(fi_poll_open(domain, &poll_attr, &ps));
	MUST(fi_poll_add(ps, &b.cq->fid, 0));
	CHECK(fi_poll(ps, ctxs, 4) == 0, "fi_poll with nothing");
	MUST(fi_recv(b.ep, buf[1], sizeof(buf[1]), desc, FI_ADDR_UNSPEC, &b_ctx));
	send_to(&a, &b, 2);
	end = now() + WAIT_SEC;
	int n;
	while ((n = fi_poll(ps, ctxs, 4)) == 0) {
		drive(&a);
		CHECK(now() < end, "fi_poll never reported B's CQ");
	}
	CHECK(n == 1 && ctxs[0] == &b_ctx, "fi_poll = %d", n);
	end = now() + WAIT_SEC;
	while ((r = fi_cq_read(b.cq, &ce, 1)) == -FI_EAGAIN)
		CHECK(now() < end, "fi_poll reported B's CQ but it stays empty");
	CHECK(r == 1 && !strcmp(buf[1], "to 2"), "B's second receive");
	MUST(fi_poll_del(ps, &b.cq->fid, 0));
	MUST(fi_close(&ps->fid));
	printf("poll set checked\n");

	/* Counter with a wait fd (libfabric's tcp answers FI_GETWAIT on a
	 * counter with -FI_ENOSYS: reported, and the tests require the
	 * section over xfer). */
	int cfd = -1;
	r = fi_control(&cntr->fid, FI_GETWAIT, &cfd);
	if (r == -FI_ENOSYS) {
		printf("counter FI_GETWAIT not supported\n");
	} else {
		MUST(r);
		CHECK(cfd >= 0, "counter wait fd");
		MUST(fi_recv(c.ep, buf[3], sizeof(buf[3]), desc, FI_ADDR_UNSPEC, NULL));
		send_to(&a, &c, 4);
		end = now() + WAIT_SEC;
		while (fi_cntr_read(cntr) < 2) {
			struct fid *f = &cntr->fid;
			if (fi_trywait(fabric, &f, 1) == 0)
				readable(cfd, 10);
			drive(&a);
			CHECK(now() < end, "the counter never moved");
		}
		CHECK(fi_cntr_read(cntr) == 2 && !strcmp(buf[3], "to 4"), "C's receive counted");
		printf("counter wait checked\n");
	}

	close_side(&a);
	close_side(&b);
	close_side(&c);
	MUST(fi_close(&cntr->fid));
	MUST(fi_close(&ws->fid));
	close_domain(av, mr, domain, fabric, info);
	printf("all waits checked\n");
	return 0;
}
