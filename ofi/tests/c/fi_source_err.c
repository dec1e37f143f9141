/* FI_SOURCE_ERR, checked the same way over any provider (FI_PROVIDER
 * selects it; the tests run it over xfer and over libfabric's tcp). One
 * process, endpoints A (sender) and B (receiver) on one domain with an AV
 * each, so that A's address is not in B's AV:
 * - fi_getinfo with FI_MSG | FI_SOURCE | FI_SOURCE_ERR returns both caps
 *   and a max_err_data that holds an address;
 * - A sends "first" to B: B's fi_cq_readfrom returns -FI_EAVAIL and
 *   fi_cq_readerr (err_data_size 0: the provider's buffer) an entry with
 *   err FI_EADDRNOTAVAIL, FI_RECV, the receive's context, its length, the
 *   bytes delivered, and err_data holding an address of err_data_size
 *   bytes, which fi_av_insert accepts;
 * - A sends "second", now that its address is inserted: a success whose
 *   fi_cq_readfrom source is the fi_addr the insertion gave;
 * - a third endpoint C, not in B's AV, sends "third": fi_cq_readerr into
 *   the application's own err_data buffer (err_data_size 64 on input)
 *   copies the address there and sets err_data_size to its length, and
 *   it differs from A's;
 * - with a multi-receive buffer posted (FI_MULTI_RECV), a fourth endpoint D
 *   not in B's AV sends two messages: each an FI_EADDRNOTAVAIL entry with
 *   `buf` where it landed in the buffer, the second after the first, and the
 *   buffer not released by them (no FI_MULTI_RECV flag): the messages were
 *   delivered.
 * Prints "all source_err checked" and exits 0. */
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

#define WAIT_SEC 30

static struct fid_cq *cq_a, *cq_b, *cq_c, *cq_d;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Drives every CQ once, reading nothing. */
static void drive(void)
{
	(void)fi_cq_read(cq_a, NULL, 0);
	(void)fi_cq_read(cq_b, NULL, 0);
	(void)fi_cq_read(cq_c, NULL, 0);
	if (cq_d)
		(void)fi_cq_read(cq_d, NULL, 0);
}

/* Sends `msg` from `ep` to `dest`, retrying while the provider asks to,
 * and waits for its completion on `cq`. */
static void send_one(struct fid_ep *ep, struct fid_cq *cq, const char *msg, fi_addr_t dest)
{
	double end = now() + WAIT_SEC;
	ssize_t r;
	while ((r = fi_send(ep, msg, strlen(msg) + 1, NULL, dest, NULL)) == -FI_EAGAIN) {
		drive();
		CHECK(now() < end, "fi_send still refused");
	}
	MUST(r);
	struct fi_cq_entry e;
	while ((r = fi_cq_read(cq, &e, 1)) != 1) {
		CHECK(r == -FI_EAGAIN, "send completion: %zd", r);
		drive();
		CHECK(now() < end, "no send completion");
	}
}

/* Waits on B's CQ: 1 and the entry with its source, or 0 once an error
 * entry is next (-FI_EAVAIL). */
static int read_b(struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	double end = now() + WAIT_SEC;
	for (;;) {
		ssize_t r = fi_cq_readfrom(cq_b, e, 1, src);
		if (r == 1)
			return 1;
		if (r == -FI_EAVAIL)
			return 0;
		CHECK(r == -FI_EAGAIN, "fi_cq_readfrom = %zd", r);
		drive();
		CHECK(now() < end, "nothing on B's CQ");
	}
}

static void open_ep(struct fid_domain *domain, struct fi_info *info, struct fid_av **av, struct fid_ep **ep,
		    struct fid_cq **cq)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	MUST(fi_av_open(domain, &av_attr, av, NULL));
	MUST(fi_cq_open(domain, &cq_attr, cq, NULL));
	MUST(fi_endpoint(domain, info, ep, NULL));
	MUST(fi_ep_bind(*ep, &(*av)->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	MUST(fi_enable(*ep));
}

int main(void)
{
	struct fi_info *h = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av_a, *av_b, *av_c;
	struct fid_ep *ep_a, *ep_b, *ep_c;
	struct fi_cq_tagged_entry e;
	static char bufs[3][64];
	static int ctx[3];
	fi_addr_t src, b_from_a, b_from_c, a_in_b;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_SOURCE | FI_SOURCE_ERR | FI_MULTI_RECV;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	printf("provider %s, max_err_data %zu, addrlen %zu\n", info->fabric_attr->prov_name,
	       info->domain_attr->max_err_data, info->src_addrlen);
	CHECK((info->caps & (FI_SOURCE | FI_SOURCE_ERR)) == (FI_SOURCE | FI_SOURCE_ERR), "caps %#llx",
	      (unsigned long long)info->caps);
	MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &domain, NULL));
	open_ep(domain, info, &av_a, &ep_a, &cq_a);
	open_ep(domain, info, &av_b, &ep_b, &cq_b);
	open_ep(domain, info, &av_c, &ep_c, &cq_c);
	char name_b[256];
	size_t len_b = sizeof(name_b);
	MUST(fi_getname(&ep_b->fid, name_b, &len_b));
	CHECK(fi_av_insert(av_a, name_b, 1, &b_from_a, 0, NULL) == 1, "insert B into A's AV");
	CHECK(fi_av_insert(av_c, name_b, 1, &b_from_c, 0, NULL) == 1, "insert B into C's AV");
	for (int i = 0; i < 3; i++)
		MUST(fi_recv(ep_b, bufs[i], sizeof(bufs[i]), NULL, FI_ADDR_UNSPEC, &ctx[i]));
	printf("capabilities checked\n");

	/* An unknown sender: an error entry whose err_data is its address,
	 * in the provider's buffer. */
	send_one(ep_a, cq_a, "first", b_from_a);
	CHECK(!read_b(&e, &src), "a success from an unknown sender (src %#llx)", (unsigned long long)src);
	struct fi_cq_err_entry err = {0};
	CHECK(fi_cq_readerr(cq_b, &err, 0) == 1, "fi_cq_readerr");
	CHECK(err.err == FI_EADDRNOTAVAIL, "err %d (%s)", err.err, fi_strerror(err.err));
	CHECK(err.op_context == &ctx[0] && (err.flags & FI_RECV) && err.len == 6 && !strcmp(bufs[0], "first"),
	      "the receive: context %p flags %#llx len %zu", err.op_context, (unsigned long long)err.flags,
	      err.len);
	CHECK(err.err_data != NULL && err.err_data_size > 0 && err.err_data_size <= info->domain_attr->max_err_data,
	      "err_data %p size %zu", err.err_data, err.err_data_size);
	char name_a[256];
	size_t len_a = err.err_data_size;
	memcpy(name_a, err.err_data, len_a);
	CHECK(fi_av_insert(av_b, name_a, 1, &a_in_b, 0, NULL) == 1, "insert err_data into B's AV");
	printf("unknown sender's address checked\n");

	/* Inserted: the next message is a success from that fi_addr. */
	send_one(ep_a, cq_a, "second", b_from_a);
	CHECK(read_b(&e, &src), "an error entry from an inserted sender");
	CHECK(e.op_context == &ctx[1] && src == a_in_b && !strcmp(bufs[1], "second"),
	      "context %p src %#llx (want %#llx)", e.op_context, (unsigned long long)src,
	      (unsigned long long)a_in_b);
	printf("inserted sender checked\n");

	/* Another unknown sender, its address copied into the application's
	 * err_data buffer. */
	send_one(ep_c, cq_c, "third", b_from_c);
	CHECK(!read_b(&e, &src), "a success from an unknown sender (src %#llx)", (unsigned long long)src);
	char mine[64];
	struct fi_cq_err_entry err2 = {.err_data = mine, .err_data_size = sizeof(mine)};
	CHECK(fi_cq_readerr(cq_b, &err2, 0) == 1, "fi_cq_readerr");
	CHECK(err2.err == FI_EADDRNOTAVAIL && err2.op_context == &ctx[2] && !strcmp(bufs[2], "third"),
	      "err %d context %p", err2.err, err2.op_context);
	CHECK(err2.err_data_size > 0 && err2.err_data_size <= sizeof(mine), "err_data_size %zu",
	      err2.err_data_size);
	CHECK(err2.err_data_size != len_a || memcmp(mine, name_a, len_a), "C's address is A's");
	fi_addr_t c_in_b;
	CHECK(fi_av_insert(av_b, mine, 1, &c_in_b, 0, NULL) == 1 && c_in_b != a_in_b, "insert C's address");
	printf("application's err_data buffer checked\n");

	/* A multi-receive buffer takes messages from an unknown sender and
	 * goes on. */
	struct fid_av *av_d;
	struct fid_ep *ep_d;
	fi_addr_t b_from_d;
	open_ep(domain, info, &av_d, &ep_d, &cq_d);
	CHECK(fi_av_insert(av_d, name_b, 1, &b_from_d, 0, NULL) == 1, "insert B into D's AV");
	size_t min = 16;
	MUST(fi_setopt(&ep_b->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &min, sizeof(min)));
	static char multi[256];
	static int mctx;
	struct iovec mv = {multi, sizeof(multi)};
	struct fi_msg mmsg = {.msg_iov = &mv, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &mctx};
	MUST(fi_recvmsg(ep_b, &mmsg, FI_MULTI_RECV));
	send_one(ep_d, cq_d, "fourth", b_from_d);
	send_one(ep_d, cq_d, "fifth", b_from_d);
	char *at[2];
	for (int i = 0; i < 2; i++) {
		CHECK(!read_b(&e, &src), "a success from an unknown sender into the multi-receive buffer");
		struct fi_cq_err_entry m = {0};
		CHECK(fi_cq_readerr(cq_b, &m, 0) == 1, "fi_cq_readerr");
		CHECK(m.err == FI_EADDRNOTAVAIL && m.op_context == &mctx && !(m.flags & FI_MULTI_RECV),
		      "entry %d: err %d context %p flags %#llx", i, m.err, m.op_context, (unsigned long long)m.flags);
		at[i] = m.buf;
		CHECK(at[i] >= multi && at[i] < multi + sizeof(multi) && !strcmp(at[i], i ? "fifth" : "fourth"),
		      "entry %d landed at %p", i, m.buf);
	}
	CHECK(at[1] == at[0] + 7, "the second message after the first (%p, %p)", at[0], at[1]);
	printf("multi-receive buffer checked\n");
	MUST(fi_close(&ep_d->fid));
	MUST(fi_close(&cq_d->fid));
	cq_d = NULL;
	MUST(fi_close(&av_d->fid));

	MUST(fi_close(&ep_a->fid));
	MUST(fi_close(&ep_b->fid));
	MUST(fi_close(&ep_c->fid));
	MUST(fi_close(&cq_a->fid));
	MUST(fi_close(&cq_b->fid));
	MUST(fi_close(&cq_c->fid));
	MUST(fi_close(&av_a->fid));
	MUST(fi_close(&av_b->fid));
	MUST(fi_close(&av_c->fid));
	MUST(fi_close(&domain->fid));
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(info);
	printf("all source_err checked\n");
	return 0;
}
