/* Authorization keys and the progress timeout through the plug-in. One
 * process; each endpoint on a domain of its own, with an AV and a CQ:
 * - fi_getinfo with domain_attr->auth_key and ep_attr->auth_key returns an
 *   fi_info carrying both, as asked;
 * - a server S on a domain whose auth_key is "job-A" serves a client whose
 *   domain has the same key, and one whose domain has another key but whose
 *   ep_attr->auth_key is "job-A" (the endpoint's key wins); a client with
 *   key "job-B" and one with none get error completions for their sends,
 *   and nothing they sent reaches S;
 * - FI_OPT_XFER_PROGRESS_TIMEOUT_MS (fi_ext_xfer.h): read back as set before
 *   fi_enable (the default is XFER_PROGRESS_TIMEOUT_MS's, else 0), -FI_EINVAL
 *   for a value of the wrong size, -FI_EOPBADSTATE after fi_enable; a client
 *   with 500 ms (FI_AUTH_TIMEOUT_MS if set) sends S a message S receives,
 *   then a 1 MiB one while S is no
 *   longer driven (its process stalled, as far as the client can tell): the
 *   send fails with FI_ETIMEDOUT.
 * Prints "all auth checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fi_ext_xfer.h"
#include "must.h"

#define WAIT_SEC 30
#define NODES 6
#define LARGE (1 << 20)

struct node {
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	fi_addr_t server;
};

static struct fid_fabric *fabric;
static struct node *nodes[NODES];
static int n_nodes;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Drives every node's CQ once, reading nothing, but `skip`'s. */
static void drive(const struct node *skip)
{
	for (int i = 0; i < n_nodes; i++)
		if (nodes[i] != skip)
			(void)fi_cq_read(nodes[i]->cq, NULL, 0);
}

/* An fi_info with these job keys (NULL: none). */
static struct fi_info *info_with(const char *domain_key, const char *ep_key)
{
	struct fi_info *h = fi_allocinfo(), *info;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG;
	if (domain_key) {
		h->domain_attr->auth_key = (uint8_t *)strdup(domain_key);
		h->domain_attr->auth_key_size = strlen(domain_key);
	}
	if (ep_key) {
		h->ep_attr->auth_key = (uint8_t *)strdup(ep_key);
		h->ep_attr->auth_key_size = strlen(ep_key);
	}
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	fi_freeinfo(h);
	return info;
}

/* A node on a domain of its own; `timeout`, unless NULL, is set with
 * FI_OPT_XFER_PROGRESS_TIMEOUT_MS before fi_enable. */
static struct node *open_node(struct fi_info *info, const uint64_t *timeout)
{
	struct node *n = calloc(1, sizeof(*n));
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	if (!fabric)
		MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
	MUST(fi_domain(fabric, info, &n->domain, NULL));
	MUST(fi_av_open(n->domain, &av_attr, &n->av, NULL));
	MUST(fi_cq_open(n->domain, &cq_attr, &n->cq, NULL));
	MUST(fi_endpoint(n->domain, info, &n->ep, NULL));
	MUST(fi_ep_bind(n->ep, &n->av->fid, 0));
	MUST(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	if (timeout)
		MUST(fi_setopt(&n->ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, timeout,
			       sizeof(*timeout)));
	MUST(fi_enable(n->ep));
	nodes[n_nodes++] = n;
	return n;
}

/* Inserts the server's name into `n`'s AV. */
static void know(struct node *n, const struct node *server)
{
	char name[256];
	size_t len = sizeof(name);
	MUST(fi_getname(&server->ep->fid, name, &len));
	CHECK(fi_av_insert(n->av, name, 1, &n->server, 0, NULL) == 1, "fi_av_insert");
}

/* Sends `len` bytes from `n` to its server and waits for the completion,
 * driving every node but `skip`: 0, or the error's number. */
static int send_to_server(struct node *n, const void *buf, size_t len, const struct node *skip)
{
	double end = now() + WAIT_SEC;
	ssize_t r;
	while ((r = fi_send(n->ep, buf, len, NULL, n->server, NULL)) == -FI_EAGAIN) {
		drive(skip);
		CHECK(now() < end, "fi_send still refused");
	}
	MUST(r);
	struct fi_cq_tagged_entry e;
	while ((r = fi_cq_read(n->cq, &e, 1)) != 1) {
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			CHECK(fi_cq_readerr(n->cq, &err, 0) == 1, "fi_cq_readerr");
			return err.err;
		}
		CHECK(r == -FI_EAGAIN, "send completion: %zd", r);
		drive(skip);
		CHECK(now() < end, "no send completion");
	}
	return 0;
}

/* The next message on the server's CQ: one of its receives, holding `want`. */
static void expect_message(struct node *s, const char *want, char bufs[][64], int *ctx)
{
	double end = now() + WAIT_SEC;
	struct fi_cq_tagged_entry e;
	ssize_t r;
	while ((r = fi_cq_read(s->cq, &e, 1)) != 1) {
		CHECK(r == -FI_EAGAIN, "server's CQ: %zd", r);
		drive(NULL);
		CHECK(now() < end, "no message at the server");
	}
	int i = (int *)e.op_context - ctx;
	CHECK(i >= 0 && i < 8 && !strcmp(bufs[i], want), "got '%s', want '%s'", i >= 0 && i < 8 ? bufs[i] : "?",
	      want);
}

int main(void)
{
	static char bufs[8][64];
	static int ctx[8];
	static char large[LARGE];

	/* The keys come back as asked. */
	struct fi_info *job_a = info_with("job-A", NULL);
	CHECK(job_a->domain_attr->auth_key_size == 5 && !memcmp(job_a->domain_attr->auth_key, "job-A", 5),
	      "domain auth_key size %zu", job_a->domain_attr->auth_key_size);
	struct fi_info *mixed = info_with("job-B", "job-A");
	CHECK(mixed->domain_attr->auth_key_size == 5 && !memcmp(mixed->domain_attr->auth_key, "job-B", 5) &&
		      mixed->ep_attr->auth_key_size == 5 && !memcmp(mixed->ep_attr->auth_key, "job-A", 5),
	      "auth_keys of the mixed fi_info");
	struct fi_info *job_b = info_with("job-B", NULL);
	struct fi_info *none = info_with(NULL, NULL);
	CHECK(none->domain_attr->auth_key_size == 0 && none->ep_attr->auth_key_size == 0, "a key unasked");
	printf("provider %s: auth_key returned as asked\n", job_a->fabric_attr->prov_name);

	struct node *s = open_node(job_a, NULL);
	for (int i = 0; i < 8; i++)
		MUST(fi_recv(s->ep, bufs[i], sizeof(bufs[i]), NULL, FI_ADDR_UNSPEC, &ctx[i]));
	struct node *keyed = open_node(job_a, NULL), *other = open_node(job_b, NULL);
	struct node *keyless = open_node(none, NULL), *own = open_node(mixed, NULL);
	know(keyed, s);
	know(other, s);
	know(keyless, s);
	know(own, s);

	int e = send_to_server(keyed, "keyed", 6, NULL);
	CHECK(e == 0, "the keyed client's send: %d (%s)", e, fi_strerror(e));
	expect_message(s, "keyed", bufs, ctx);
	e = send_to_server(other, "other", 6, NULL);
	CHECK(e != 0, "a client with another key was served");
	printf("another key refused: %s\n", fi_strerror(e));
	e = send_to_server(keyless, "keyless", 8, NULL);
	CHECK(e != 0, "a client without a key was served");
	printf("no key refused: %s\n", fi_strerror(e));
	e = send_to_server(own, "own", 4, NULL);
	CHECK(e == 0, "the client with the key in ep_attr: %d (%s)", e, fi_strerror(e));
	expect_message(s, "own", bufs, ctx);
	double quiet = now() + 0.2;
	while (now() < quiet)
		drive(NULL);
	struct fi_cq_tagged_entry entry;
	CHECK(fi_cq_read(s->cq, &entry, 1) == -FI_EAGAIN, "a refused client's message arrived");
	printf("admission checked\n");

	/* The progress timeout, as an endpoint option. */
	struct fi_info *plain = info_with("job-A", NULL);
	struct fid_domain *d;
	struct fid_ep *ep;
	MUST(fi_domain(fabric, plain, &d, NULL));
	MUST(fi_endpoint(d, plain, &ep, NULL));
	uint64_t v = 1;
	size_t len = sizeof(v);
	MUST(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, &v, &len));
	const char *env = getenv("XFER_PROGRESS_TIMEOUT_MS");
	CHECK(len == sizeof(v) && v == (env ? strtoull(env, NULL, 10) : 0), "default %llu",
	      (unsigned long long)v);
	uint32_t small = 5;
	CHECK(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, &small, sizeof(small)) ==
		      -FI_EINVAL,
	      "a value of the wrong size");
	v = 1234;
	MUST(fi_setopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, &v, sizeof(v)));
	v = 0;
	MUST(fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, &v, &len));
	CHECK(v == 1234, "read back %llu", (unsigned long long)v);
	MUST(fi_close(&ep->fid));
	MUST(fi_close(&d->fid));

	/* 500 ms; longer where the harness runs this slowly (valgrind on a
	 * loaded machine: the first message's handshake alone can take that). */
	const char *slow = getenv("FI_AUTH_TIMEOUT_MS");
	uint64_t timeout = slow ? strtoull(slow, NULL, 10) : 500;
	struct node *t = open_node(job_a, &timeout);
	CHECK(fi_setopt(&t->ep->fid, FI_OPT_ENDPOINT, FI_OPT_XFER_PROGRESS_TIMEOUT_MS, &timeout,
			sizeof(timeout)) == -FI_EOPBADSTATE,
	      "set after fi_enable");
	printf("option checked\n");
	know(t, s);
	e = send_to_server(t, "hello", 6, NULL);
	CHECK(e == 0, "the first message: %d (%s)", e, fi_strerror(e));
	expect_message(s, "hello", bufs, ctx);
	/* S is no longer driven: it makes no progress, as a stopped process. */
	double start = now();
	e = send_to_server(t, large, LARGE, s);
	CHECK(e == FI_ETIMEDOUT, "the send to a stalled peer: %d (%s)", e, fi_strerror(e));
	printf("stalled peer: FI_ETIMEDOUT after %.0f ms (timeout %llu ms)\n", (now() - start) * 1e3,
	       (unsigned long long)timeout);
	printf("progress timeout checked\n");

	for (int i = n_nodes - 1; i >= 0; i--) {
		MUST(fi_close(&nodes[i]->ep->fid));
		MUST(fi_close(&nodes[i]->cq->fid));
		MUST(fi_close(&nodes[i]->av->fid));
		MUST(fi_close(&nodes[i]->domain->fid));
		free(nodes[i]);
	}
	MUST(fi_close(&fabric->fid));
	fi_freeinfo(job_a);
	fi_freeinfo(job_b);
	fi_freeinfo(mixed);
	fi_freeinfo(none);
	fi_freeinfo(plain);
	printf("all auth checked\n");
	return 0;
}
