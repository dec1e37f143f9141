/* The plug-in's shm domain as a libfabric program meets it, one process,
 * asked for by name (domain_attr->name "shm"; no XFER_PROVIDER needed):
 * - fi_getinfo offers it with FI_ADDR_STR and with FI_RMA | FI_RMA_EVENT,
 *   FI_LOCAL_COMM and FI_REMOTE_COMM only when asked for;
 *   refuses a service (with and without FI_SOURCE), a node that is a host
 *   name, FI_SOCKADDR_IN, and a node string naming a TCP endpoint
 *   (-FI_ENODATA each); an auth_key (shm checks job keys) comes back as
 *   asked, and one longer than 1024 bytes is refused;
 * - two endpoints A and B: B's fi_getname is "fi_xfer_shm://" and its
 *   15-byte name in 30 hex digits, NUL included in the length;
 *   fi_getinfo with B's string as node and no service gives it back as
 *   dest_addr; fi_av_insert of that string (an array of char *) reaches B:
 *   a tagged message from A arrives intact; fi_av_straddr and fi_av_lookup
 *   give the string back; fi_av_insertsvc with the string as node and no
 *   service inserts it, with a service -FI_ENOSYS; a malformed string and a
 *   TCP endpoint's name are not inserted; fi_endpoint takes an auth_key,
 *   and refuses a size without a key (-FI_EINVAL).
 * Prints "all shm checked" and exits 0. */
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
#include "drive.h"

#define PREFIX "fi_xfer_shm://"

static struct fi_info *shm_hints(uint64_t caps, uint32_t format)
{
	struct fi_info *h = fi_allocinfo();
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	h->addr_format = format;
	h->domain_attr->name = strdup("shm");
	h->fabric_attr->prov_name = strdup("xfer");
	return h;
}

/* fi_getinfo(node, service, flags) with `h` must answer -FI_ENODATA. */
static void refused(struct fi_info *h, const char *node, const char *service, uint64_t flags, const char *what)
{
	struct fi_info *got = NULL;
	int r = fi_getinfo(FI_VERSION(1, 17), node, service, flags, h, &got);
	CHECK(r == -FI_ENODATA, "%s: fi_getinfo = %d", what, r);
}

int main(void)
{
	struct fi_info *hints = shm_hints(FI_TAGGED | FI_RMA | FI_RMA_EVENT, FI_ADDR_STR), *info = NULL;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info));
	CHECK(!strcmp(info->domain_attr->name, "shm"), "domain %s", info->domain_attr->name);
	CHECK(info->addr_format == FI_ADDR_STR, "addr_format %u", info->addr_format);
	CHECK(info->caps & FI_RMA_EVENT, "no FI_RMA_EVENT: caps %#llx", (unsigned long long)info->caps);
	CHECK(!info->src_addr && !info->dest_addr, "addresses nobody named");
	/* This host only: FI_REMOTE_COMM only when asked for (Open MPI's ofi
	 * MTL asks for it). */
	CHECK((info->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM)) == FI_LOCAL_COMM &&
		      !(info->domain_attr->caps & FI_REMOTE_COMM),
	      "caps %#llx", (unsigned long long)info->caps);
	struct fi_info *remote = shm_hints(FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM, FI_FORMAT_UNSPEC), *r_info;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, remote, &r_info));
	CHECK(r_info->caps & FI_REMOTE_COMM, "FI_REMOTE_COMM asked, not given");
	fi_freeinfo(r_info);
	fi_freeinfo(remote);
	printf("shm offered with FI_ADDR_STR and FI_RMA_EVENT\n");

	refused(hints, NULL, "9228", FI_SOURCE, "a service to listen on");
	refused(hints, "127.0.0.1", "9228", 0, "a node and a service");
	refused(hints, "localhost", NULL, 0, "a host name");
	refused(hints, "xfer://01047f00000124040500000000000000", NULL, 0, "a TCP endpoint's name");
	struct fi_info *sin = shm_hints(FI_TAGGED, FI_SOCKADDR_IN);
	refused(sin, NULL, NULL, 0, "FI_SOCKADDR_IN");
	fi_freeinfo(sin);
	struct fi_info *keyed = shm_hints(FI_TAGGED, FI_ADDR_STR), *k_info;
	keyed->domain_attr->auth_key = (uint8_t *)strdup("job");
	keyed->domain_attr->auth_key_size = 3;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, keyed, &k_info));
	CHECK(k_info->domain_attr->auth_key_size == 3 && !memcmp(k_info->domain_attr->auth_key, "job", 3),
	      "auth_key not given back: %zu bytes", k_info->domain_attr->auth_key_size);
	fi_freeinfo(k_info);
	free(keyed->domain_attr->auth_key);
	keyed->domain_attr->auth_key = calloc(1025, 1);
	keyed->domain_attr->auth_key_size = 1025;
	refused(keyed, NULL, NULL, 0, "an auth_key of 1025 bytes");
	fi_freeinfo(keyed);
	printf("services, socket addresses and oversized keys refused\n");

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_mr *mr;
	void *desc;
	static char rbuf[64];
	open_domain(info, rbuf, sizeof(rbuf), &fabric, &domain, &mr, &desc);
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fid_av *av;
	MUST(fi_av_open(domain, &av_attr, &av, NULL));
	struct fid_ep *a, *b;
	struct fid_cq *cq_a, *cq_b;
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &a, &cq_a);
	open_ep_on(domain, info, av, FI_CQ_FORMAT_TAGGED, &b, &cq_b);

	char name[128];
	size_t len = sizeof(name);
	MUST(fi_getname(&b->fid, name, &len));
	CHECK(len == strlen(name) + 1, "fi_getname length %zu for '%s'", len, name);
	CHECK(!strncmp(name, PREFIX, strlen(PREFIX)) && strlen(name) == strlen(PREFIX) + 30, "fi_getname: '%s'",
	      name);
	CHECK(!strncmp(name + strlen(PREFIX), "037873", 6), "not an shm name: '%s'", name);
	printf("fi_getname: %s\n", name);

	struct fi_info *to_b = NULL;
	MUST(fi_getinfo(FI_VERSION(1, 17), name, NULL, 0, hints, &to_b));
	CHECK(to_b->dest_addr && !strcmp(to_b->dest_addr, name), "dest_addr '%s'",
	      to_b->dest_addr ? (char *)to_b->dest_addr : "(none)");
	CHECK(to_b->dest_addrlen == len, "dest_addrlen %zu", to_b->dest_addrlen);
	fi_addr_t at_b = FI_ADDR_NOTAVAIL;
	const char *one[1] = {to_b->dest_addr};
	CHECK(fi_av_insert(av, one, 1, &at_b, 0, NULL) == 1, "fi_av_insert of dest_addr");
	printf("node string to dest_addr to fi_av_insert checked\n");

	static char msg[] = "over shm, named by a string";
	MUST(fi_trecv(b, rbuf, sizeof(rbuf), desc, FI_ADDR_UNSPEC, 7, 0, NULL));
	POST(fi_tsend(a, msg, sizeof(msg), desc ? desc : NULL, at_b, 7, NULL));
	struct fi_cq_tagged_entry e;
	next_completion(cq_b, cq_a, &e, NULL);
	CHECK(e.len == sizeof(msg) && e.tag == 7 && !memcmp(rbuf, msg, sizeof(msg)), "received %zu bytes '%s'", e.len,
	      rbuf);
	next_completion(cq_a, cq_b, &e, NULL);
	printf("message through the string address checked\n");

	char back[128];
	size_t blen = sizeof(back);
	fi_av_straddr(av, name, back, &blen);
	CHECK(!strcmp(back, name) && blen == len, "fi_av_straddr: '%s' (%zu)", back, blen);
	blen = sizeof(back);
	MUST(fi_av_lookup(av, at_b, back, &blen));
	CHECK(!strcmp(back, name) && blen == len, "fi_av_lookup: '%s' (%zu)", back, blen);
	fi_addr_t again = FI_ADDR_NOTAVAIL;
	CHECK(fi_av_insertsvc(av, name, NULL, &again, 0, NULL) == 1 && again != FI_ADDR_NOTAVAIL,
	      "fi_av_insertsvc of the string");
	int r = fi_av_insertsvc(av, name, "9228", &again, 0, NULL);
	CHECK(r == -FI_ENOSYS, "fi_av_insertsvc with a service = %d", r);
	const char *bad[2] = {PREFIX "zz", "xfer://01047f00000124040500000000000000"};
	fi_addr_t nots[2];
	r = fi_av_insert(av, bad, 2, nots, 0, NULL);
	CHECK(r == 0 && nots[0] == FI_ADDR_NOTAVAIL && nots[1] == FI_ADDR_NOTAVAIL,
	      "fi_av_insert of a malformed string and a TCP name = %d", r);
	printf("straddr, lookup, insertsvc and bad strings checked\n");

	/* A key given to fi_endpoint directly is taken; a size without a key
	 * is not. */
	struct fi_info *with_key = fi_dupinfo(info);
	with_key->ep_attr->auth_key = (uint8_t *)strdup("job");
	with_key->ep_attr->auth_key_size = 3;
	struct fid_ep *kep;
	MUST(fi_endpoint(domain, with_key, &kep, NULL));
	MUST(fi_close(&kep->fid));
	free(with_key->ep_attr->auth_key);
	with_key->ep_attr->auth_key = NULL;
	r = fi_endpoint(domain, with_key, &kep, NULL);
	CHECK(r == -FI_EINVAL, "fi_endpoint with an auth_key_size and no key = %d", r);
	fi_freeinfo(with_key);

	fi_freeinfo(to_b);
	fi_freeinfo(hints);
	close_eps(a, b, cq_a, cq_b);
	close_domain(av, mr, domain, fabric, info);
	printf("all shm checked\n");
	return 0;
}
