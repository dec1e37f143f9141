/* Authorization keys between two processes, over whichever xfer domain
 * XFER_PROVIDER selects (the tests run it over the RDM engine's shm,
 * tcp-rdm and shm+tcp domains): the key is domain_attr->auth_key, as
 * libfabric programs pass it, and nothing else is xfer's.
 *
 *   fi_auth_pair server KEY               serve until a client says stop
 *   fi_auth_pair client HEXNAME KEY ok      a client with the server's key
 *   fi_auth_pair client HEXNAME KEY refused a client with another key
 *                                           ("-" as KEY: none at all)
 *
 * The server prints "name HEX" (fi_getname, out of band for the clients)
 * and "ready", then receives tagged messages: a hello ('h' and the
 * client's name), which it answers "ack" after inserting the name, or
 * "stop"; any other payload (what a refused client sent) fails it. It
 * prints "served N" (the hellos) and exits 0. A client with the key sends
 * its hello, receives the ack, sends stop, each completing without error,
 * and prints "answered". A refused client's sends complete with an error
 * (the connection's handshake refused it before anything it sent was
 * delivered); it prints "refused ERR" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "must.h"
#include "drive.h"

#define TAG 0x11
#define MSG_MAX 256

struct node {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_mr *mr;
	void *desc;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	char buf[2][MSG_MAX];
};

/* Opens everything with `key` (NULL: none) as the domain's auth_key. */
static void open_node(struct node *n, const char *key)
{
	struct fi_info *h = fi_allocinfo();
	CHECK(h != NULL, "fi_allocinfo");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->fabric_attr->prov_name = strdup("xfer");
	if (key) {
		h->domain_attr->auth_key = (uint8_t *)strdup(key);
		h->domain_attr->auth_key_size = strlen(key);
	}
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &n->info));
	fi_freeinfo(h);
	CHECK(!key || (n->info->domain_attr->auth_key_size == strlen(key) &&
		       !memcmp(n->info->domain_attr->auth_key, key, strlen(key))),
	      "fi_getinfo did not give the auth_key back");
	open_domain(n->info, n->buf, sizeof(n->buf), &n->fabric, &n->domain, &n->mr, &n->desc);
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	MUST(fi_av_open(n->domain, &av_attr, &n->av, NULL));
	open_ep_on(n->domain, n->info, n->av, FI_CQ_FORMAT_TAGGED, &n->ep, &n->cq);
}

static void close_node(struct node *n)
{
	MUST(fi_close(&n->ep->fid));
	MUST(fi_close(&n->cq->fid));
	close_domain(n->av, n->mr, n->domain, n->fabric, n->info);
}

/* The next completion of n's CQ: 0 (into e), or the error's code. */
static int next(struct node *n, struct fi_cq_tagged_entry *e)
{
	struct fi_cq_err_entry err;
	if (next_completion(n->cq, NULL, e, &err) == 0)
		return 0;
	return err.err ? err.err : -1;
}

/* Inserts a name fi_getname gave (a string with FI_ADDR_STR, which
 * fi_av_insert takes as an array of strings). */
static fi_addr_t insert(struct node *n, const void *name)
{
	fi_addr_t at;
	const void *p = name;
	int r = n->info->addr_format == FI_ADDR_STR ? fi_av_insert(n->av, &p, 1, &at, 0, NULL)
						     : fi_av_insert(n->av, name, 1, &at, 0, NULL);
	CHECK(r == 1, "fi_av_insert = %d", r);
	return at;
}

static void send_msg(struct node *n, fi_addr_t to, const void *p, size_t len)
{
	memcpy(n->buf[1], p, len);
	POST_DRIVING(fi_tsend(n->ep, n->buf[1], len, n->desc, to, TAG, n->buf[1]), n->cq, n->cq);
}

static int serve(const char *key)
{
	struct node n = {0};
	open_node(&n, key);
	char name[MSG_MAX];
	size_t len = sizeof(name) - 1;
	MUST(fi_getname(&n.ep->fid, name, &len));
	printf("name ");
	for (size_t i = 0; i < len; i++)
		printf("%02x", (unsigned char)name[i]);
	printf("\nready\n");
	fflush(stdout);
	int hellos = 0;
	for (;;) {
		struct fi_cq_tagged_entry e;
		POST_DRIVING(fi_trecv(n.ep, n.buf[0], MSG_MAX, n.desc, FI_ADDR_UNSPEC, TAG, 0, n.buf[0]), n.cq, n.cq);
		int r;
		while ((r = next(&n, &e)) == 0 && e.op_context != n.buf[0])
			;
		CHECK(r == 0, "a receive failed: %d (%s)", r, fi_strerror(r));
		if (e.len == 4 && !memcmp(n.buf[0], "stop", 4))
			break;
		CHECK(e.len > 1 && n.buf[0][0] == 'h', "a message that is no hello (%zu bytes, '%c'): delivered from a refused peer?",
		      e.len, n.buf[0][0]);
		fi_addr_t client = insert(&n, n.buf[0] + 1);
		send_msg(&n, client, "ack", 3);
		hellos++;
	}
	printf("served %d\n", hellos);
	close_node(&n);
	return 0;
}

static int client(const char *hex, const char *key, int ok)
{
	struct node n = {0};
	open_node(&n, key);
	unsigned char name[MSG_MAX];
	size_t nlen = strlen(hex) / 2;
	CHECK(nlen > 0 && nlen <= sizeof(name), "name of %zu bytes", nlen);
	for (size_t i = 0; i < nlen; i++)
		CHECK(sscanf(hex + 2 * i, "%2hhx", &name[i]) == 1, "hex name");
	fi_addr_t server = insert(&n, name);
	char hello[MSG_MAX] = "h";
	size_t len = sizeof(hello) - 1;
	MUST(fi_getname(&n.ep->fid, hello + 1, &len));
	struct fi_cq_tagged_entry e;
	if (!ok) {
		/* What a refused client sends must never reach the server. */
		send_msg(&n, server, "bad", 3);
		int r = next(&n, &e);
		CHECK(r != 0, "a send with another key completed");
		send_msg(&n, server, "bad again", 9);
		int again = next(&n, &e);
		CHECK(again != 0, "a second send with another key completed");
		printf("refused %d (%s)\n", r, fi_strerror(r));
		close_node(&n);
		return 0;
	}
	POST_DRIVING(fi_trecv(n.ep, n.buf[0], MSG_MAX, n.desc, FI_ADDR_UNSPEC, TAG, 0, n.buf[0]), n.cq, n.cq);
	send_msg(&n, server, hello, 1 + len);
	int got = 0, sent = 0;
	while (!(got && sent)) {
		int r = next(&n, &e);
		CHECK(r == 0, "with the server's key: error %d (%s)", r, fi_strerror(r));
		if (e.op_context == n.buf[0]) {
			CHECK(e.len == 3 && !memcmp(n.buf[0], "ack", 3), "the answer (%zu bytes)", e.len);
			got = 1;
		} else {
			sent = 1;
		}
	}
	send_msg(&n, server, "stop", 4);
	CHECK(next(&n, &e) == 0, "stop");
	printf("answered\n");
	close_node(&n);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		return serve(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "client"))
		return client(argv[2], strcmp(argv[3], "-") ? argv[3] : NULL, !strcmp(argv[4], "ok"));
	fprintf(stderr, "usage: fi_auth_pair server KEY | client HEXNAME KEY|- ok|refused\n");
	return 2;
}
