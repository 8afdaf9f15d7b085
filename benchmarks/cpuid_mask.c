/* Hide AVX-512 from every CPUID this process (and what it execs) runs.
 *
 * Loaded with LD_PRELOAD by benchmarks/avx2_host.py (docs/benchmarks.md,
 * "Peers on AVX2 (CPUID masked)"). Its constructor turns on CPUID faulting
 * (arch_prctl ARCH_SET_CPUID 0: the kernel then sends SIGSEGV for each CPUID
 * instruction; the CPU must have it, /proc/cpuinfo's "cpuid_fault") and
 * installs a SIGSEGV handler that runs the real CPUID
 * with faulting briefly off, clears the AVX-512 feature bits of leaf 7, and
 * steps over the instruction. Any other SIGSEGV goes to the handler that was
 * there before (the default one: the process dies as it would have).
 * Threads inherit the setting; exec resets it in the kernel, so the child
 * takes it again from LD_PRELOAD. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <asm/prctl.h>
#include <stdio.h>
#include <stdlib.h>

static struct sigaction previous;
static volatile long masked_calls;

static long set_faulting(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

static void on_segv(int sig, siginfo_t *info, void *raw) {
    ucontext_t *uc = raw;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (info->si_code != SI_KERNEL || ip[0] != 0x0f || ip[1] != 0xa2) {
        sigaction(SIGSEGV, &previous, NULL); /* not ours: fault again, as before */
        return;
    }
    uint32_t a = (uint32_t)r[REG_RAX], c = (uint32_t)r[REG_RCX], b, d;
    uint32_t leaf = a, sub = c;
    set_faulting(0);
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    set_faulting(1);
    if (leaf == 7 && sub == 0) {
        /* EBX: avx512f 16, dq 17, ifma 21, pf 26, er 27, cd 28, bw 30, vl 31 */
        b &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) |
               (1u << 30) | (1u << 31));
        /* ECX: vbmi 1, vbmi2 6, vnni 11, bitalg 12, vpopcntdq 14 */
        c &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        /* EDX: 4vnniw 2, 4fmaps 3, vp2intersect 8, fp16 23 */
        d &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23));
    } else if (leaf == 7 && sub == 1) {
        a &= ~(1u << 5); /* avx512_bf16 */
    }
    masked_calls++;
    r[REG_RAX] = a; r[REG_RBX] = b; r[REG_RCX] = c; r[REG_RDX] = d;
    r[REG_RIP] += 2;
}

long fuelc_cpuid_masked_calls(void) { return masked_calls; }

__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &previous) != 0 || set_faulting(1) != 0) {
        fprintf(stderr, "cpuid_mask: CPUID faulting is not available here "
                        "(arch_prctl ARCH_SET_CPUID failed); refusing to run unmasked\n");
        _exit(3);
    }
}
