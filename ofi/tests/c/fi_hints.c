/* What fi_getinfo answers to the hints libfabric programs commonly give,
 * checked the same way over any provider (FI_PROVIDER selects it; the
 * tests run it over xfer and over libfabric's tcp):
 * - capabilities asked for come back, FI_DIRECTED_RECV is not added unasked;
 * - mr_mode FI_MR_BASIC (the old form) comes back as FI_MR_BASIC, with RMA;
 * - FI_SOURCE with node and service sets src_addr to that address
 *   (FI_SOCKADDR_IN: a sockaddr_in of the port), without node too;
 * - node and service without FI_SOURCE set dest_addr;
 * - fi_getname of an endpoint opened from the FI_SOURCE fi_info is the
 *   address asked for.
 * Usage: fi_hints PORT. Prints "all hints checked" and exits 0. */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "must.h"

static struct fi_info *base(void)
{
	struct fi_info *h = fi_allocinfo();
	CHECK(h != NULL, "fi_allocinfo");
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_MSG;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	return h;
}

static void check_sin(const void *addr, size_t len, const char *ip, int port, const char *what)
{
	const struct sockaddr_in *sin = addr;
	char text[INET_ADDRSTRLEN] = "";
	CHECK(addr != NULL && len == sizeof(*sin) && sin->sin_family == AF_INET, "%s is not a sockaddr_in", what);
	inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text));
	CHECK(ntohs(sin->sin_port) == port && (!ip || !strcmp(text, ip)), "%s is %s:%d, not %s:%d", what, text,
	      ntohs(sin->sin_port), ip ? ip : "*", port);
}

int main(int argc, char **argv)
{
	CHECK(argc == 2, "usage: fi_hints PORT");
	const char *port = argv[1];
	int portn = atoi(port);
	struct fi_info *h, *info;

	/* Capabilities: what was asked for, no directed receives added. */
	h = base();
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	printf("provider %s, caps %#llx\n", info->fabric_attr->prov_name, (unsigned long long)info->caps);
	CHECK(info->caps & FI_MSG, "FI_MSG not returned");
	CHECK(!(info->caps & FI_DIRECTED_RECV), "FI_DIRECTED_RECV added unasked");
	fi_freeinfo(info);
	h->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	CHECK((info->caps & (FI_MSG | FI_TAGGED | FI_DIRECTED_RECV)) == (FI_MSG | FI_TAGGED | FI_DIRECTED_RECV),
	      "caps asked for not all returned: %#llx", (unsigned long long)info->caps);
	fi_freeinfo(info);

	/* The old registration mode, with RMA: returned as asked. */
	h->caps = FI_MSG | FI_RMA;
	h->domain_attr->mr_mode = FI_MR_BASIC;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info));
	CHECK(info->domain_attr->mr_mode == FI_MR_BASIC, "FI_MR_BASIC answered with %#x", info->domain_attr->mr_mode);
	CHECK(info->caps & FI_RMA, "FI_RMA not returned");
	fi_freeinfo(info);
	fi_freeinfo(h);

	/* FI_SOURCE with node and service; then without node. */
	h = base();
	h->addr_format = FI_SOCKADDR_IN;
	MUST(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", port, FI_SOURCE, h, &info));
	check_sin(info->src_addr, info->src_addrlen, "127.0.0.1", portn, "src_addr (node, service, FI_SOURCE)");
	{
		struct fid_fabric *fabric;
		struct fid_domain *domain;
		struct fid_av *av;
		struct fid_cq *cq;
		struct fid_ep *ep;
		struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
		struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
		char name[128];
		size_t len = sizeof(name);
		MUST(fi_fabric(info->fabric_attr, &fabric, NULL));
		MUST(fi_domain(fabric, info, &domain, NULL));
		MUST(fi_av_open(domain, &av_attr, &av, NULL));
		MUST(fi_cq_open(domain, &cq_attr, &cq, NULL));
		MUST(fi_endpoint(domain, info, &ep, NULL));
		MUST(fi_ep_bind(ep, &av->fid, 0));
		MUST(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
		MUST(fi_enable(ep));
		MUST(fi_getname(&ep->fid, name, &len));
		check_sin(name, len, "127.0.0.1", portn, "fi_getname of the FI_SOURCE endpoint");
		MUST(fi_close(&ep->fid));
		MUST(fi_close(&cq->fid));
		MUST(fi_close(&av->fid));
		MUST(fi_close(&domain->fid));
		MUST(fi_close(&fabric->fid));
	}
	fi_freeinfo(info);
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE, h, &info));
	check_sin(info->src_addr, info->src_addrlen, NULL, portn, "src_addr (service, FI_SOURCE)");
	fi_freeinfo(info);

	/* Node and service without FI_SOURCE: the destination. */
	MUST(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", port, 0, h, &info));
	check_sin(info->dest_addr, info->dest_addrlen, "127.0.0.1", portn, "dest_addr (node, service)");
	fi_freeinfo(info);
	fi_freeinfo(h);
	printf("all hints checked\n");
	return 0;
}
