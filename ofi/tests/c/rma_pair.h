/* What the one-process RMA tests (fi_rma.c, fi_rma_event.c) share: two
 * endpoints A (initiator) and B (target) on CQs cq_a and cq_b, each with a
 * region, and two counters bound to one of them; the helpers that wait on
 * them. Include after must.h and drive.h. */
#ifndef RMA_PAIR_H
#define RMA_PAIR_H

#include <stdint.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

static struct fid_cq *cq_a, *cq_b;

/* The pair and what A needs to reach B's region. */
struct pair {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_ep *ep_a, *ep_b;
	struct fid_mr *mr_a, *mr_b;
	/* Two counters, bound as pair_open was told. */
	struct fid_cntr *k[2];
	/* A's region's descriptor. */
	void *desc;
	/* B's region as A names it: its key, the address of its first byte
	 * (its virtual address under FI_MR_VIRT_ADDR, else 0) and B's address. */
	uint64_t key, base;
	fi_addr_t b;
};

/* Reads one completion from `cq` into `e`, driving the other CQ meanwhile
 * (whose entries must not come: the caller waits for them in turn); an
 * error entry fails the program. */
static inline void one(struct fid_cq *cq, struct fid_cq *other, struct fi_cq_data_entry *e)
{
	next_completion(cq, other, e, NULL);
}

/* Whether `n` bytes at `dst` become `src`, driving B meanwhile (with
 * manual progress the target applies a write when it is driven). */
static inline int landed(const char *dst, const char *src, size_t n)
{
	double end = now() + WAIT_SEC;
	while (memcmp(dst, src, n)) {
		(void)fi_cq_read(cq_b, NULL, 0);
		if (now() > end)
			return 0;
	}
	return 1;
}

/* Opens an endpoint with a CQ of its own bound for both directions, and
 * the counters bound with their flags (0: not bound); enables it. */
static inline void open_ep(struct pair *p, struct fid_ep **ep, struct fid_cq **cq, const uint64_t flags[2])
{
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA};
	MUST(fi_cq_open(p->domain, &cq_attr, cq, NULL));
	MUST(fi_endpoint(p->domain, p->info, ep, NULL));
	MUST(fi_ep_bind(*ep, &p->av->fid, 0));
	MUST(fi_ep_bind(*ep, &(*cq)->fid, FI_TRANSMIT | FI_RECV));
	for (int i = 0; i < 2; i++)
		if (flags[i])
			MUST(fi_ep_bind(*ep, &p->k[i]->fid, flags[i]));
	MUST(fi_enable(*ep));
}

/* Opens the pair over the provider FI_PROVIDER names, with `caps` (FI_RMA
 * and FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY
 * asked), A's region over `local`, B's over `target` (remote read and
 * write), counter k[i] bound to A for on_a[i] and to B for on_b[i]. */
static inline void pair_open(struct pair *p, uint64_t caps, char *local, size_t local_len, char *target,
			     size_t target_len, const uint64_t on_a[2], const uint64_t on_b[2])
{
	struct fi_info *h = fi_allocinfo();
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cntr_attr cntr_attr = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	MUST(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &p->info));
	fi_freeinfo(h);
	printf("provider %s, mr_mode %#x\n", p->info->fabric_attr->prov_name, p->info->domain_attr->mr_mode);
	CHECK((p->info->caps & caps) == caps, "caps %#llx offered of %#llx", (unsigned long long)p->info->caps,
	      (unsigned long long)caps);
	MUST(fi_fabric(p->info->fabric_attr, &p->fabric, NULL));
	MUST(fi_domain(p->fabric, p->info, &p->domain, NULL));
	MUST(fi_av_open(p->domain, &av_attr, &p->av, NULL));
	for (int i = 0; i < 2; i++)
		MUST(fi_cntr_open(p->domain, &cntr_attr, &p->k[i], NULL));
	open_ep(p, &p->ep_a, &cq_a, on_a);
	open_ep(p, &p->ep_b, &cq_b, on_b);
	MUST(fi_mr_reg(p->domain, local, local_len, FI_WRITE | FI_READ, 0, 0, 0, &p->mr_a, NULL));
	MUST(fi_mr_reg(p->domain, target, target_len, FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 1, 0, &p->mr_b, NULL));
	if (p->info->domain_attr->mr_mode & FI_MR_ENDPOINT)
		MUST(fi_mr_bind(p->mr_b, &p->ep_b->fid, 0));
	if (p->info->domain_attr->mr_mode & (FI_MR_ENDPOINT | FI_MR_RMA_EVENT))
		MUST(fi_mr_enable(p->mr_b));
	p->desc = fi_mr_desc(p->mr_a);
	p->key = fi_mr_key(p->mr_b);
	p->base = p->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)target : 0;
	char name[256];
	size_t len = sizeof(name);
	MUST(fi_getname(&p->ep_b->fid, name, &len));
	CHECK(fi_av_insert(p->av, name, 1, &p->b, 0, NULL) == 1, "insert B");
}

/* Closes what pair_open opened. */
static inline void pair_close(struct pair *p)
{
	close_eps(p->ep_a, p->ep_b, cq_a, cq_b);
	MUST(fi_close(&p->mr_a->fid));
	MUST(fi_close(&p->mr_b->fid));
	for (int i = 0; i < 2; i++)
		MUST(fi_close(&p->k[i]->fid));
	close_domain(p->av, NULL, p->domain, p->fabric, p->info);
}

#endif
