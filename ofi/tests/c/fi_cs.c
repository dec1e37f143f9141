/* A libfabric client and server written the way libfabric programs
 * commonly are (fabtests' shape): the server asks fi_getinfo for its
 * service with FI_SOURCE and listens there, each client asks for the
 * server's node and service, inserts info->dest_addr into its AV and sends
 * its own name (fi_getname) as its first message; the server inserts that
 * name and answers. Nothing here is xfer's: the provider is whatever
 * FI_PROVIDER selects (the tests run it over xfer and over libfabric's
 * own tcp provider).
 *
 *   fi_cs server PORT NCLIENTS [in|str]   serve NCLIENTS clients in turn
 *   fi_cs client HOST PORT ID [in|str]    one client
 *   fi_cs client - HEXNAME ID            one client given the server's name
 *                                        (its "name" line) out of band
 *   fi_cs inuse PORT             a second server on PORT: must fail with
 *                                -FI_EADDRINUSE (exit 0), at any call
 *
 * With `in` both sides ask for FI_SOCKADDR_IN addresses and FI_SOURCE:
 * src_addr, dest_addr and fi_getname are struct sockaddr_in,
 * fi_av_straddr prints fi_sockaddr_in://127.0.0.1:PORT, the client reaches
 * the server through fi_av_insertsvc(HOST, PORT), and the server's
 * fi_cq_readfrom gives each data message the AV entry it made from the
 * client's sockaddr_in. With `str` both sides ask for FI_ADDR_STR: src_addr
 * and dest_addr are strings naming the port, fi_av_insert takes arrays of
 * strings (the server's dest_addr, each client's fi_getname),
 * fi_av_straddr gives the string back, and fi_av_insertsvc takes it as
 * node without a service.
 *
 * Slots of the server's buffer: 0 a client's name, 1 the ack, 2 the go,
 * 3.. the data, the last the bye. Per client the server: receives its name on a receive posted while the
 * previous client was still there, with that client's address as source
 * (ignored without FI_DIRECTED_RECV, fi_msg(3)); answers "ack ID"; lets
 * four tagged messages arrive unexpected (it first receives the fifth,
 * sent after them on another tag) and then receives them in order;
 * cancels a receive nothing matches (FI_ECANCELED through fi_cq_readerr);
 * posts the next client's name receive and sends "bye". Every payload,
 * length and tag is checked. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "must.h"

#define TAG_DATA 0x10
#define TAG_GO 0x20
#define TAG_NEVER 0x30
#define NDATA 4
#define MSG_MAX 256
#define WAIT_SEC 30

struct node {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fid_mr *mr;
	void *desc;
	char buf[(NDATA + 4) * MSG_MAX];
};

static int sockaddr_in, addr_str;

static struct fi_info *hints(void)
{
	struct fi_info *h = fi_allocinfo();
	CHECK(h != NULL, "fi_allocinfo");
	if (sockaddr_in) {
		h->addr_format = FI_SOCKADDR_IN;
		h->caps |= FI_SOURCE;
	}
	if (addr_str)
		h->addr_format = FI_ADDR_STR;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = FI_CONTEXT;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return h;
}

/* Opens fabric, domain, CQ, AV and endpoint from n->info; returns the
 * first failing call's code (and its name in *what) instead of exiting, so
 * that `inuse` can tell where the service in use was reported. */
static int open_all(struct node *n, const char **what)
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	int ret;
#define TRY(call)                             \
	do {                                  \
		*what = #call;                \
		ret = (call);                 \
		if (ret)                      \
			return ret;           \
	} while (0)
	TRY(fi_fabric(n->info->fabric_attr, &n->fabric, NULL));
	TRY(fi_domain(n->fabric, n->info, &n->domain, NULL));
	TRY(fi_cq_open(n->domain, &cq_attr, &n->cq, NULL));
	TRY(fi_av_open(n->domain, &av_attr, &n->av, NULL));
	TRY(fi_endpoint(n->domain, n->info, &n->ep, NULL));
	TRY(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	TRY(fi_ep_bind(n->ep, &n->av->fid, 0));
	TRY(fi_enable(n->ep));
	if (n->info->domain_attr->mr_mode & FI_MR_LOCAL) {
		TRY(fi_mr_reg(n->domain, n->buf, sizeof(n->buf), FI_SEND | FI_RECV, 0, 0, 0, &n->mr, NULL));
		n->desc = fi_mr_desc(n->mr);
	}
#undef TRY
	return 0;
}

static void close_all(struct node *n)
{
	if (n->mr)
		MUST(fi_close(&n->mr->fid));
	MUST(fi_close(&n->ep->fid));
	MUST(fi_close(&n->av->fid));
	MUST(fi_close(&n->cq->fid));
	MUST(fi_close(&n->domain->fid));
	MUST(fi_close(&n->fabric->fid));
	fi_freeinfo(n->info);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Reads one completion (bounded wait); an error entry ends the program
 * unless it is `want_err` for context `err_ctx`. Returns 1 for an error
 * entry that was expected. */
static fi_addr_t last_src;

static int next(struct node *n, struct fi_cq_tagged_entry *e, int want_err, void *err_ctx)
{
	double end = now() + WAIT_SEC;
	for (;;) {
		ssize_t r = fi_cq_readfrom(n->cq, e, 1, &last_src);
		if (r == 1)
			return 0;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};
			MUST(fi_cq_readerr(n->cq, &err, 0));
			CHECK(want_err && err.err == want_err && err.op_context == err_ctx,
			      "completion error %d (%s), context %p", err.err, fi_strerror(err.err), err.op_context);
			return 1;
		}
		CHECK(r == -FI_EAGAIN, "fi_cq_read = %zd (%s)", r, fi_strerror((int)-r));
		CHECK(now() < end, "no completion after %d s", WAIT_SEC);
	}
}

/* Waits for the completion of the operation with context `ctx`; other
 * completions on the way must be sends (counted in *sends). */
static void wait_for(struct node *n, void *ctx, struct fi_cq_tagged_entry *out, int *sends)
{
	struct fi_cq_tagged_entry e;
	for (;;) {
		next(n, &e, 0, NULL);
		if (e.op_context == ctx) {
			if (out)
				*out = e;
			return;
		}
		CHECK(sends && (e.flags & FI_SEND), "unexpected completion, flags %#llx", (unsigned long long)e.flags);
		(*sends)--;
	}
}

/* Posts an untagged send of `len` bytes at slot `slot` of the buffer and
 * retries while the provider asks to (-FI_EAGAIN, after reading the CQ). */
static void send_msg(struct node *n, int slot, size_t len, fi_addr_t to, uint64_t tag, int tagged, void *ctx)
{
	char *p = n->buf + slot * MSG_MAX;
	double end = now() + WAIT_SEC;
	for (;;) {
		ssize_t r = tagged ? fi_tsend(n->ep, p, len, n->desc, to, tag, ctx)
				   : fi_send(n->ep, p, len, n->desc, to, ctx);
		if (r != -FI_EAGAIN) {
			MUST(r);
			return;
		}
		(void)fi_cq_read(n->cq, NULL, 0); /* progress, reading nothing */
		CHECK(now() < end, "send still refused after %d s", WAIT_SEC);
	}
}

static void *slot_ptr(struct node *n, int slot)
{
	return n->buf + slot * MSG_MAX;
}

static struct fi_context ctx[NDATA + 8];

static int server(const char *port, int nclients)
{
	struct node n = {0};
	struct fi_info *h = hints();
	const char *what;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE, h, &n.info));
	fi_freeinfo(h);
	CHECK(n.info->src_addr != NULL && n.info->src_addrlen > 0, "fi_getinfo(FI_SOURCE) set no src_addr");
	if (addr_str)
		CHECK(n.info->addr_format == FI_ADDR_STR && strstr(n.info->src_addr, port), "src_addr '%s' names no port %s",
		      (char *)n.info->src_addr, port);
	if (sockaddr_in) {
		struct sockaddr_in *sin = n.info->src_addr;
		CHECK(n.info->addr_format == FI_SOCKADDR_IN && n.info->src_addrlen == sizeof(*sin) &&
			      sin->sin_family == AF_INET && ntohs(sin->sin_port) == atoi(port),
		      "src_addr is not a sockaddr_in for port %s", port);
	}
	printf("server: provider %s, caps %s\n", n.info->fabric_attr->prov_name,
	       n.info->caps & FI_DIRECTED_RECV ? "with FI_DIRECTED_RECV" : "without FI_DIRECTED_RECV");
	int ret = open_all(&n, &what);
	CHECK(ret == 0, "%s = %d (%s)", what, ret, fi_strerror(-ret));
	char name[256];
	size_t len = sizeof(name);
	MUST(fi_getname(&n.ep->fid, name, &len));
	CHECK(len > 0 && len <= sizeof(name), "fi_getname length %zu", len);
	/* The name, for clients that get it out of band. */
	printf("name ");
	for (size_t i = 0; i < len; i++)
		printf("%02x", (unsigned char)name[i]);
	printf("\n");
	printf("ready\n");
	fflush(stdout);

	fi_addr_t prev = FI_ADDR_UNSPEC;
	/* Slot 0: a client's name. 1: ack/bye. 2: go. 3..3+NDATA: data. */
	MUST(fi_recv(n.ep, slot_ptr(&n, 0), MSG_MAX, n.desc, prev, &ctx[0]));
	for (int c = 0; c < nclients; c++) {
		struct fi_cq_tagged_entry e;
		int sends = 0;
		wait_for(&n, &ctx[0], &e, &sends);
		CHECK(e.len > sizeof(uint32_t) && (e.flags & FI_RECV), "name message of %zu bytes", e.len);
		uint32_t id;
		memcpy(&id, slot_ptr(&n, 0), sizeof(id));
		fi_addr_t peer;
		char *name = (char *)slot_ptr(&n, 0) + sizeof(id);
		/* FI_ADDR_STR: fi_av_insert takes an array of strings. */
		ret = addr_str ? fi_av_insert(n.av, &name, 1, &peer, 0, NULL) : fi_av_insert(n.av, name, 1, &peer, 0, NULL);
		CHECK(ret == 1, "fi_av_insert of client %u's name = %d", id, ret);

		/* The four data messages and the go are sent after the ack:
		 * post only the go first, so the data arrive unexpected. */
		MUST(fi_trecv(n.ep, slot_ptr(&n, 2), MSG_MAX, n.desc, peer, TAG_GO, 0, &ctx[2]));
		int alen = snprintf(slot_ptr(&n, 1), MSG_MAX, "ack %u", id) + 1;
		send_msg(&n, 1, alen, peer, 0, 0, &ctx[1]);
		sends++;
		wait_for(&n, &ctx[2], &e, &sends);
		CHECK(e.tag == TAG_GO && !strcmp(slot_ptr(&n, 2), "go"), "go message");
		for (int k = 0; k < NDATA; k++)
			MUST(fi_trecv(n.ep, slot_ptr(&n, 3 + k), MSG_MAX, n.desc, peer, TAG_DATA, 0, &ctx[3 + k]));
		for (int k = 0; k < NDATA; k++) {
			char want[64];
			wait_for(&n, &ctx[3 + k], &e, &sends);
			snprintf(want, sizeof(want), "data %u.%d", id, k);
			CHECK(e.tag == TAG_DATA && e.len == strlen(want) + 1 && !strcmp(slot_ptr(&n, 3 + k), want),
			      "data message %d of client %u: '%s' (%zu bytes)", k, id, (char *)slot_ptr(&n, 3 + k), e.len);
			/* FI_SOURCE (asked for with sockaddr_in): the client's
			 * entry, inserted from its sockaddr_in. */
			CHECK(!sockaddr_in || last_src == peer, "data message %d of client %u from %#llx, not %#llx", k,
			      id, (unsigned long long)last_src, (unsigned long long)peer);
		}
		/* A receive nothing matches, cancelled. */
		MUST(fi_trecv(n.ep, slot_ptr(&n, 3), MSG_MAX, n.desc, FI_ADDR_UNSPEC, TAG_NEVER, 0, &ctx[NDATA + 4]));
		MUST(fi_cancel(&n.ep->fid, &ctx[NDATA + 4]));
		for (;;) {
			if (next(&n, &e, FI_ECANCELED, &ctx[NDATA + 4]))
				break;
			CHECK(e.flags & FI_SEND, "completion other than a send before the cancel's");
			sends--;
		}
		/* The next client's name: posted while this one is still there,
		 * with its address (ignored without FI_DIRECTED_RECV). */
		prev = peer;
		MUST(fi_recv(n.ep, slot_ptr(&n, 0), MSG_MAX, n.desc, prev, &ctx[0]));
		int blen = snprintf(slot_ptr(&n, NDATA + 3), MSG_MAX, "bye %u", id) + 1;
		send_msg(&n, NDATA + 3, blen, peer, 0, 0, &ctx[1]);
		sends++;
		while (sends > 0) {
			next(&n, &e, 0, NULL);
			CHECK(e.flags & FI_SEND, "completion other than a send");
			sends--;
		}
		/* Done with this client: its address leaves the AV (the next
		 * client may get the same ephemeral port, so the same sockaddr). */
		MUST(fi_av_remove(n.av, &peer, 1, 0));
		printf("served client %u\n", id);
		fflush(stdout);
	}
	MUST(fi_cancel(&n.ep->fid, &ctx[0]));
	close_all(&n);
	printf("served %d clients\n", nclients);
	return 0;
}

static int client(const char *host, const char *port, uint32_t id)
{
	struct node n = {0};
	struct fi_info *h = hints();
	const char *what;
	/* host "-": the server's name came out of band, in hex in `port`. */
	int oob = !strcmp(host, "-");
	MUST(fi_getinfo(FI_VERSION(1, 17), oob ? NULL : host, oob ? NULL : port, 0, h, &n.info));
	fi_freeinfo(h);
	CHECK(oob || (n.info->dest_addr != NULL && n.info->dest_addrlen > 0), "fi_getinfo(node, service) set no dest_addr");
	int ret = open_all(&n, &what);
	CHECK(ret == 0, "%s = %d (%s)", what, ret, fi_strerror(-ret));
	fi_addr_t server;
	if (oob) {
		unsigned char name[256];
		size_t nlen = strlen(port) / 2;
		CHECK(nlen > 0 && nlen <= sizeof(name), "name of %zu bytes", nlen);
		for (size_t i = 0; i < nlen; i++)
			CHECK(sscanf(port + 2 * i, "%2hhx", &name[i]) == 1, "hex name");
		ret = fi_av_insert(n.av, name, 1, &server, 0, NULL);
		CHECK(ret == 1, "fi_av_insert of the out-of-band name = %d", ret);
	} else if (addr_str) {
		char *dest = n.info->dest_addr, str[256];
		size_t slen = sizeof(str);
		CHECK(n.info->addr_format == FI_ADDR_STR && strstr(dest, port), "dest_addr '%s' names no port %s", dest,
		      port);
		ret = fi_av_insert(n.av, &dest, 1, &server, 0, NULL);
		CHECK(ret == 1, "fi_av_insert(&info->dest_addr) = %d", ret);
		CHECK(fi_av_straddr(n.av, dest, str, &slen) == str && !strcmp(str, dest), "fi_av_straddr '%s'", str);
		ret = fi_av_insertsvc(n.av, dest, NULL, &server, 0, NULL);
		CHECK(ret == 1, "fi_av_insertsvc(%s, NULL) = %d", dest, ret);
	} else if (!sockaddr_in) {
		ret = fi_av_insert(n.av, n.info->dest_addr, 1, &server, 0, NULL);
		CHECK(ret == 1, "fi_av_insert(info->dest_addr) = %d", ret);
	} else {
		struct sockaddr_in *sin = n.info->dest_addr;
		char str[128], want[64];
		size_t slen = sizeof(str);
		CHECK(n.info->addr_format == FI_SOCKADDR_IN && n.info->dest_addrlen == sizeof(*sin) &&
			      sin->sin_family == AF_INET && ntohs(sin->sin_port) == atoi(port),
		      "dest_addr is not a sockaddr_in for port %s", port);
		CHECK(fi_av_straddr(n.av, n.info->dest_addr, str, &slen) == str, "fi_av_straddr");
		snprintf(want, sizeof(want), "fi_sockaddr_in://%s:%s", host, port);
		CHECK(!strcmp(str, want) && slen == strlen(want) + 1, "fi_av_straddr: '%s' (%zu)", str, slen);
		ret = fi_av_insertsvc(n.av, host, port, &server, 0, NULL);
		CHECK(ret == 1, "fi_av_insertsvc(%s, %s) = %d", host, port, ret);
	}

	/* Slot 0: our name. 1: ack, then bye. 2..: data and go. */
	size_t len = MSG_MAX - sizeof(id);
	memcpy(slot_ptr(&n, 0), &id, sizeof(id));
	MUST(fi_getname(&n.ep->fid, (char *)slot_ptr(&n, 0) + sizeof(id), &len));
	MUST(fi_recv(n.ep, slot_ptr(&n, 1), MSG_MAX, n.desc, server, &ctx[1]));
	send_msg(&n, 0, sizeof(id) + len, server, 0, 0, &ctx[0]);
	int sends = 1;
	struct fi_cq_tagged_entry e;
	wait_for(&n, &ctx[1], &e, &sends);
	char want[64];
	snprintf(want, sizeof(want), "ack %u", id);
	CHECK(!strcmp(slot_ptr(&n, 1), want), "ack: '%s'", (char *)slot_ptr(&n, 1));
	MUST(fi_recv(n.ep, slot_ptr(&n, 1), MSG_MAX, n.desc, server, &ctx[1]));
	for (int k = 0; k < NDATA; k++) {
		int dlen = snprintf(slot_ptr(&n, 2 + k), MSG_MAX, "data %u.%d", id, k) + 1;
		send_msg(&n, 2 + k, dlen, server, TAG_DATA, 1, &ctx[2 + k]);
		sends++;
	}
	strcpy(slot_ptr(&n, 2 + NDATA), "go");
	send_msg(&n, 2 + NDATA, 3, server, TAG_GO, 1, &ctx[2 + NDATA]);
	sends++;
	wait_for(&n, &ctx[1], &e, &sends);
	snprintf(want, sizeof(want), "bye %u", id);
	CHECK(!strcmp(slot_ptr(&n, 1), want), "bye: '%s'", (char *)slot_ptr(&n, 1));
	while (sends > 0) {
		next(&n, &e, 0, NULL);
		CHECK(e.flags & FI_SEND, "completion other than a send");
		sends--;
	}
	close_all(&n);
	printf("client %u done\n", id);
	return 0;
}

static int inuse(const char *port)
{
	struct node n = {0};
	struct fi_info *h = hints();
	const char *what = "fi_getinfo";
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE, h, &n.info);
	fi_freeinfo(h);
	if (!ret)
		ret = open_all(&n, &what);
	printf("second server on port %s: %s = %d (%s)\n", port, what, ret, fi_strerror(-ret));
	return ret == -FI_EADDRINUSE ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	sockaddr_in = !strcmp(argv[argc - 1], "in");
	addr_str = !strcmp(argv[argc - 1], "str");
	int extra = sockaddr_in || addr_str;
	if (argc == 4 + extra && !strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]));
	if (argc == 5 + extra && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], (uint32_t)atoi(argv[4]));
	if (argc == 3 && !strcmp(argv[1], "inuse"))
		return inuse(argv[2]);
	fprintf(stderr, "usage: fi_cs server PORT NCLIENTS | client HOST PORT ID | inuse PORT\n");
	return 2;
}
