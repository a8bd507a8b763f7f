/*
 * The schema of power management: a pool's `power` block (the policy and
 * every number it and the manager use), a server's `power` block (its power
 * model and actuators), the top-level `power` block (the agents' metrics
 * listener and key) and the checks that tie them to the pools.
 */
#include "conf/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "power/policy.h"
#include "power/report.h"
#include "power/wol.h"

void
dm_conf_power_defaults(struct dm_conf_power *pw)
{
    struct dm_power_params d;
    dm_power_params_default(&d);
    *pw = (struct dm_conf_power){
        .period_ms = 5000,
        .trend_interval_ms = 1000,
        .min_active = d.min_active,
        .min_change_ms = 10000,
        .t1_w = d.t1_w,
        .step_w = d.step_w,
        .tcp_max = d.tcp_max,
        .full_w = d.full_w,
        .tier_low_w = d.tier_low_w,
        .tier_high_w = d.tier_high_w,
        .boot_ms = d.boot_us / 1000,
        .boot_timeout_ms = 60000,
        .drain_timeout_ms = 30000,
        .delay_off_ms = d.delay_off_us / 1000,
        .history_ms = d.history_us / 1000,
        .margin = d.margin,
        .slow_start_ms = 10000,
        .command_timeout_ms = 10000,
        .action_interval_ms = 1000,
        .report_timeout_ms = 3000,
        .hold_timeout_ms = 30000,
        .hold_queue = 1024,
    };
    pw->normal = (struct dm_conf_weights){ d.normal.alpha, d.normal.beta, d.normal.neg_beta,
                                           d.normal.neg_alpha };
    for (int i = 0; i < 3; i++) {
        pw->tiers[i] = (struct dm_conf_weights){ d.tiers[i].alpha, d.tiers[i].beta,
                                                 d.tiers[i].neg_beta, d.tiers[i].neg_alpha };
    }
}

/* [alpha, beta, -beta', -alpha'] with alpha > beta > 0 > -beta' > -alpha'. */
static void
get_weights(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
            struct dm_conf_weights *out)
{
    size_t count;
    double v[4];
    if (n->type != YAML_SEQUENCE_NODE) {
        dm_conf_fail_type(ld, n, "a list of four numbers [alpha, beta, -beta, -alpha]");
        return;
    }
    yaml_node_item_t *items = dm_conf_list_items(ld, n, &count);
    if (count != 4) {
        dm_conf_fail_at(ld, n, "%s: expected four numbers [alpha, beta, -beta, -alpha], got %zu",
                        key, count);
        return;
    }
    for (size_t i = 0; i < 4; i++) {
        if (!dm_conf_get_double(ld, dm_conf_node(ld, items[i]), key, -1.0, &v[i])) {
            return;
        }
    }
    if (!(v[0] > v[1] && v[1] > 0 && 0 > v[2] && v[2] > v[3])) {
        dm_conf_fail_at(ld, n, "%s: expected alpha > beta > 0 > -beta > -alpha", key);
        return;
    }
    if (v[0] > 1) {
        /* A change of the connections by more than tcp_max per live server a trend interval. */
        dm_conf_fail_at(
            ld, n, "%s: each weight between -1 and 1 (a share of tcp_max x live servers)", key);
        return;
    }
    *out = (struct dm_conf_weights){ v[0], v[1], v[2], v[3] };
}

enum { WT_MULTI, WT_MANY, WT_NORMAL, WT_LITTLE, WT_N };
static const char *const weight_keys[WT_N] = {
    [WT_MULTI] = "multi",
    [WT_MANY] = "many_spare",
    [WT_NORMAL] = "normal",
    [WT_LITTLE] = "little_spare",
};

static void
load_weights(struct dm_conf_loader *ld, struct dm_conf_power *pw, const yaml_node_t *n)
{
    yaml_node_t *v[WT_N];
    if (!dm_conf_walk(ld, n, true, weight_keys, WT_N, v)) {
        return;
    }
    if (v[WT_MULTI] != NULL) {
        get_weights(ld, v[WT_MULTI], "multi", &pw->normal);
    }
    for (int i = 0; i < 3; i++) {
        if (v[WT_MANY + i] != NULL) {
            get_weights(ld, v[WT_MANY + i], weight_keys[WT_MANY + i], &pw->tiers[i]);
        }
    }
}

enum {
    PW_POLICY,
    PW_PERIOD,
    PW_TREND,
    PW_MIN_ACTIVE,
    PW_MIN_CHANGE,
    PW_T1,
    PW_STEP,
    PW_TCP_MAX,
    PW_FULL_W,
    PW_WEIGHTS,
    PW_TIER_LOW,
    PW_TIER_HIGH,
    PW_BOOT,
    PW_BOOT_TIMEOUT,
    PW_DRAIN_TIMEOUT,
    PW_DELAY_OFF,
    PW_HISTORY,
    PW_MARGIN,
    PW_SLOW_START,
    PW_COMMAND_TIMEOUT,
    PW_ACTION_INTERVAL,
    PW_REPORT_TIMEOUT,
    PW_HOLD_TIMEOUT,
    PW_HOLD_QUEUE,
    PW_WAKE,
    PW_SLEEP,
    PW_TCP,
    PW_N
};
static const char *const pool_power_keys[PW_N] = {
    [PW_POLICY] = "policy",
    [PW_PERIOD] = "period",
    [PW_TREND] = "trend_interval",
    [PW_MIN_ACTIVE] = "min_active",
    [PW_MIN_CHANGE] = "min_change_interval",
    [PW_T1] = "t1",
    [PW_STEP] = "step",
    [PW_TCP_MAX] = "tcp_max",
    [PW_FULL_W] = "full_w",
    [PW_WEIGHTS] = "weights",
    [PW_TIER_LOW] = "tier_low",
    [PW_TIER_HIGH] = "tier_high",
    [PW_BOOT] = "boot_time",
    [PW_BOOT_TIMEOUT] = "boot_timeout",
    [PW_DRAIN_TIMEOUT] = "drain_timeout",
    [PW_DELAY_OFF] = "delay_off",
    [PW_HISTORY] = "history",
    [PW_MARGIN] = "margin",
    [PW_SLOW_START] = "slow_start",
    [PW_COMMAND_TIMEOUT] = "command_timeout",
    [PW_ACTION_INTERVAL] = "action_interval",
    [PW_REPORT_TIMEOUT] = "report_timeout",
    [PW_HOLD_TIMEOUT] = "hold_timeout",
    [PW_HOLD_QUEUE] = "hold_queue",
    [PW_WAKE] = "wake",
    [PW_SLEEP] = "sleep",
    [PW_TCP] = "tcp",
};

static const char *const wake_rules[] = { "most-efficient", "first" };
static const char *const sleep_rules[] = { "least-loaded", "last" };
static const char *const tcp_sources[] = { "proxy", "agent" };

static void
get_policy(struct dm_conf_loader *ld, const yaml_node_t *n, char **out)
{
    const char *s = dm_conf_get_text(ld, n, "a power policy name");
    const char *names[16];
    size_t k = 0;
    char buf[DM_CONF_SHOW_BUF], list[256];
    if (s == NULL) {
        return;
    }
    if (dm_power_find(s) != NULL) {
        (void)dm_conf_get_string(ld, n, out);
        return;
    }
    for (; dm_power_registry[k] != NULL && k < DM_CONF_NKEYS(names); k++) {
        names[k] = dm_power_registry[k]->name;
    }
    const char *near = dm_conf_suggest(s, names, k);
    dm_conf_fail_at(ld, n, "unknown power policy %s (%s%s%s: %s)",
                    dm_conf_quote(s, strlen(s), buf, sizeof(buf)), near ? "did you mean \"" : "",
                    near ? near : "", near ? "\"? known" : "known",
                    dm_conf_join_names(names, k, list, sizeof(list)));
}

/* A duration key of the power block; zero only where zero_ok. */
static void
get_ms(struct dm_conf_loader *ld, yaml_node_t *const *v, int key, bool zero_ok, uint64_t *out)
{
    if (v[key] != NULL) {
        (void)dm_conf_get_duration(ld, v[key], pool_power_keys[key], zero_ok, out);
    }
}

/* Watts above this are a mistake (the agents' reports are bounded alike):
 * sums of them stay finite, and so do /power's figures. */
#define DM_CONF_WATTS_MAX 100000.0

static void
get_num(struct dm_conf_loader *ld, yaml_node_t *const *v, int key, double min, double max,
        double *out)
{
    if (v[key] != NULL) {
        (void)dm_conf_get_double_in(ld, v[key], pool_power_keys[key], min, max, out);
    }
}

void
dm_conf_load_pool_power(struct dm_conf_loader *ld, struct dm_conf_pool *p, const yaml_node_t *n)
{
    struct dm_conf_power *pw = &p->power;
    yaml_node_t *v[PW_N];
    if (dm_conf_is_off(n)) {
        return;
    }
    if (!dm_conf_walk(ld, n, true, pool_power_keys, PW_N, v)) {
        return;
    }
    pw->enabled = true;
    if (v[PW_POLICY] != NULL) {
        get_policy(ld, v[PW_POLICY], &pw->policy);
    }
    get_ms(ld, v, PW_PERIOD, false, &pw->period_ms);
    get_ms(ld, v, PW_TREND, false, &pw->trend_interval_ms);
    if (v[PW_MIN_ACTIVE] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[PW_MIN_ACTIVE], "min_active", 0, 1000000, &pw->min_active);
    }
    get_ms(ld, v, PW_MIN_CHANGE, true, &pw->min_change_ms);
    get_num(ld, v, PW_T1, 1e-3, DM_CONF_WATTS_MAX, &pw->t1_w);
    get_num(ld, v, PW_STEP, 0, DM_CONF_WATTS_MAX, &pw->step_w);
    if (v[PW_TCP_MAX] != NULL && v[PW_TCP_MAX]->type == YAML_SCALAR_NODE &&
        strcmp(dm_conf_text_of(v[PW_TCP_MAX]), "auto") == 0) {
        pw->tcp_max_auto = true;
    } else if (v[PW_TCP_MAX] != NULL && v[PW_TCP_MAX]->type == YAML_SCALAR_NODE &&
               strspn(dm_conf_text_of(v[PW_TCP_MAX]), "0123456789+-.eE") !=
                   v[PW_TCP_MAX]->data.scalar.length) {
        dm_conf_fail_type(ld, v[PW_TCP_MAX], "a number or auto");
    } else {
        get_num(ld, v, PW_TCP_MAX, 1e-3, 1e9, &pw->tcp_max);
    }
    get_num(ld, v, PW_FULL_W, 1e-3, DM_CONF_WATTS_MAX, &pw->full_w);
    if (v[PW_WEIGHTS] != NULL) {
        load_weights(ld, pw, v[PW_WEIGHTS]);
    }
    get_num(ld, v, PW_TIER_LOW, 0, DM_CONF_WATTS_MAX, &pw->tier_low_w);
    get_num(ld, v, PW_TIER_HIGH, 0, DM_CONF_WATTS_MAX, &pw->tier_high_w);
    get_ms(ld, v, PW_BOOT, true, &pw->boot_ms);
    get_ms(ld, v, PW_BOOT_TIMEOUT, false, &pw->boot_timeout_ms);
    get_ms(ld, v, PW_DRAIN_TIMEOUT, false, &pw->drain_timeout_ms);
    get_ms(ld, v, PW_DELAY_OFF, true, &pw->delay_off_ms);
    get_ms(ld, v, PW_HISTORY, true, &pw->history_ms);
    get_num(ld, v, PW_MARGIN, 0, 100, &pw->margin);
    get_ms(ld, v, PW_SLOW_START, true, &pw->slow_start_ms);
    get_ms(ld, v, PW_COMMAND_TIMEOUT, false, &pw->command_timeout_ms);
    get_ms(ld, v, PW_ACTION_INTERVAL, true, &pw->action_interval_ms);
    get_ms(ld, v, PW_REPORT_TIMEOUT, false, &pw->report_timeout_ms);
    get_ms(ld, v, PW_HOLD_TIMEOUT, true, &pw->hold_timeout_ms);
    if (v[PW_HOLD_QUEUE] != NULL) {
        (void)dm_conf_get_unsigned(ld, v[PW_HOLD_QUEUE], "hold_queue", 0, 1000000, &pw->hold_queue);
    }
    int c;
    if (v[PW_WAKE] != NULL && (c = dm_conf_get_choice(ld, v[PW_WAKE], "wake rule", wake_rules,
                                                      DM_CONF_NKEYS(wake_rules))) >= 0) {
        pw->wake_rule = (enum dm_power_wake_rule)c;
    }
    if (v[PW_SLEEP] != NULL && (c = dm_conf_get_choice(ld, v[PW_SLEEP], "sleep rule", sleep_rules,
                                                       DM_CONF_NKEYS(sleep_rules))) >= 0) {
        pw->sleep_rule = (enum dm_power_sleep_rule)c;
    }
    if (v[PW_TCP] != NULL && (c = dm_conf_get_choice(ld, v[PW_TCP], "tcp source", tcp_sources,
                                                     DM_CONF_NKEYS(tcp_sources))) >= 0) {
        pw->tcp_source = (enum dm_power_tcp_source)c;
    }
    if (pw->tier_low_w > pw->tier_high_w) {
        dm_conf_fail_at(ld, n, "pool \"%s\": power: tier_low (%g) is above tier_high (%g)", p->name,
                        pw->tier_low_w, pw->tier_high_w);
    }
    if (pw->policy == NULL) {
        pw->policy = dm_conf_dup_str(ld, "boot-aware");
    }
}

enum {
    SP_IDLE_W,
    SP_FULL_W,
    SP_ASLEEP_W,
    SP_BOOTING_W,
    SP_AGENT,
    SP_WAKE,
    SP_SLEEP,
    SP_MAC,
    SP_WOL_TO,
    SP_CONTROL,
    SP_CONTROL_TOKEN,
    SP_WAKE_COMMAND,
    SP_SLEEP_COMMAND,
    SP_KEEP_ON,
    SP_KEY_FILE,
    SP_N
};
static const char *const server_power_keys[SP_N] = {
    [SP_IDLE_W] = "idle_w",
    [SP_FULL_W] = "full_w",
    [SP_ASLEEP_W] = "asleep_w",
    [SP_BOOTING_W] = "booting_w",
    [SP_AGENT] = "agent",
    [SP_WAKE] = "wake",
    [SP_SLEEP] = "sleep",
    [SP_MAC] = "mac",
    [SP_WOL_TO] = "wol_to",
    [SP_CONTROL] = "control",
    [SP_CONTROL_TOKEN] = "control_token_file",
    [SP_WAKE_COMMAND] = "wake_command",
    [SP_SLEEP_COMMAND] = "sleep_command",
    [SP_KEEP_ON] = "keep_on",
    [SP_KEY_FILE] = "key_file",
};
static const char *const act_names[] = { "none", "wol", "http", "command" };

static bool get_token(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, char **out);
static bool get_secret(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key,
                       uint8_t **out, size_t *out_len);

/* A name as the agent report format allows it: 1-63 of [A-Za-z0-9._-]. */
static bool
is_agent_name(const char *s)
{
    size_t len = strlen(s);
    return len >= 1 && len <= 63 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == len;
}

/*
 * A command template's placeholders ({host}, {port}, {name}, {mac}, replaced
 * when it runs, proxy/power.c): an unknown one ({hostname}) would be run as
 * written, {mac} needs the server's mac, and {name} goes into /bin/sh -c
 * unquoted, so the server's name must hold nothing a shell would read.
 */
static void
check_template(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, const char *tpl,
               const struct dm_conf_server *s)
{
    char buf[DM_CONF_SHOW_BUF];
    for (const char *p = strchr(tpl, '{'); p != NULL; p = strchr(p + 1, '{')) {
        size_t len = strspn(p + 1, "abcdefghijklmnopqrstuvwxyz_");
        if (len == 0 || p[1 + len] != '}') {
            continue; /* not a placeholder: ${HOME}, {a,b} are the shell's */
        }
        const char *w = p + 1;
        if (len == 4 && strncmp(w, "host", 4) == 0) {
            continue;
        }
        if (len == 4 && strncmp(w, "port", 4) == 0) {
            continue;
        }
        if (len == 3 && strncmp(w, "mac", 3) == 0) {
            if (!s->power.has_mac) {
                dm_conf_fail_at(ld, n, "%s: {mac}, but the server has no \"mac\"", key);
            }
            continue;
        }
        if (len == 4 && strncmp(w, "name", 4) == 0) {
            if (s->name != NULL &&
                strspn(s->name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                                "._-:@+=,/") != strlen(s->name)) {
                dm_conf_fail_at(ld, n,
                                "%s: {name}, but the server's name %s has characters a shell "
                                "would read (use A-Z a-z 0-9 . _ - : @ + = , /)",
                                key, dm_conf_quote(s->name, strlen(s->name), buf, sizeof(buf)));
            }
            continue;
        }
        dm_conf_fail_at(ld, n, "%s: unknown placeholder %s (host, port, name, mac)", key,
                        dm_conf_quote(p, len + 2, buf, sizeof(buf)));
    }
}

void
dm_conf_load_server_power(struct dm_conf_loader *ld, struct dm_conf_pool *p,
                          struct dm_conf_server *s, const yaml_node_t *n)
{
    struct dm_conf_server_power *sp = &s->power;
    yaml_node_t *v[SP_N];
    char buf[DM_CONF_SHOW_BUF];
    if (!dm_conf_walk(ld, n, true, server_power_keys, SP_N, v)) {
        return;
    }
    static const int watts[] = { SP_IDLE_W, SP_FULL_W, SP_ASLEEP_W, SP_BOOTING_W };
    double *dst[] = { &sp->idle_w, &sp->full_w, &sp->asleep_w, &sp->booting_w };
    for (size_t i = 0; i < DM_CONF_NKEYS(watts); i++) {
        if (v[watts[i]] != NULL) {
            (void)dm_conf_get_double_in(ld, v[watts[i]], server_power_keys[watts[i]], 0,
                                        DM_CONF_WATTS_MAX, dst[i]);
        }
    }
    if (v[SP_AGENT] != NULL && dm_conf_get_string(ld, v[SP_AGENT], &sp->agent) &&
        !is_agent_name(sp->agent)) {
        dm_conf_fail_at(ld, v[SP_AGENT], "bad agent name %s (1 to 63 of A-Z a-z 0-9 . _ -)",
                        dm_conf_quote(sp->agent, strlen(sp->agent), buf, sizeof(buf)));
    }
    if (v[SP_MAC] != NULL) {
        const char *m = dm_conf_get_text(ld, v[SP_MAC], "a MAC address");
        if (m != NULL && dm_wol_parse_mac(m, sp->mac) == 0) {
            sp->has_mac = true;
        } else if (m != NULL) {
            dm_conf_fail_at(ld, v[SP_MAC], "bad MAC address %s (want aa:bb:cc:dd:ee:ff)",
                            dm_conf_quote(m, strlen(m), buf, sizeof(buf)));
        }
    }
    if (v[SP_WOL_TO] != NULL) {
        (void)dm_conf_get_addr(ld, v[SP_WOL_TO], false, &sp->wol_to);
    }
    if (v[SP_CONTROL] != NULL) {
        (void)dm_conf_get_addr(ld, v[SP_CONTROL], false, &sp->control);
    }
    if (v[SP_CONTROL_TOKEN] != NULL &&
        get_token(ld, v[SP_CONTROL_TOKEN], "control_token_file", &sp->control_token) &&
        sp->control.text == NULL) {
        dm_conf_fail_at(ld, v[SP_CONTROL_TOKEN], "control_token_file: there is no \"control\"");
    }
    if (v[SP_WAKE_COMMAND] != NULL) {
        (void)dm_conf_get_string(ld, v[SP_WAKE_COMMAND], &sp->wake_command);
    }
    if (v[SP_SLEEP_COMMAND] != NULL) {
        (void)dm_conf_get_string(ld, v[SP_SLEEP_COMMAND], &sp->sleep_command);
    }
    if (v[SP_KEY_FILE] != NULL) {
        (void)get_secret(ld, v[SP_KEY_FILE], "key_file", &sp->agent_key, &sp->agent_key_len);
    }
    if (v[SP_KEEP_ON] != NULL) {
        (void)dm_conf_get_bool(ld, v[SP_KEEP_ON], &sp->keep_on);
    }
    if (sp->wake_command != NULL) {
        check_template(ld, v[SP_WAKE_COMMAND], "wake_command", sp->wake_command, s);
    }
    if (sp->sleep_command != NULL) {
        check_template(ld, v[SP_SLEEP_COMMAND], "sleep_command", sp->sleep_command, s);
    }
    /* The actuator given, or the one the keys present imply. */
    sp->wake = sp->has_mac                ? DM_ACT_WOL
               : sp->control.text != NULL ? DM_ACT_HTTP
               : sp->wake_command != NULL ? DM_ACT_COMMAND
                                          : DM_ACT_NONE;
    sp->sleep = sp->control.text != NULL    ? DM_ACT_HTTP
                : sp->sleep_command != NULL ? DM_ACT_COMMAND
                                            : DM_ACT_NONE;
    int a;
    if (v[SP_WAKE] != NULL && (a = dm_conf_get_choice(ld, v[SP_WAKE], "wake actuator", act_names,
                                                      DM_CONF_NKEYS(act_names))) >= 0) {
        sp->wake = (enum dm_power_act)a;
    }
    if (v[SP_SLEEP] != NULL && (a = dm_conf_get_choice(ld, v[SP_SLEEP], "sleep actuator", act_names,
                                                       DM_CONF_NKEYS(act_names))) >= 0) {
        if (a == DM_ACT_WOL) {
            dm_conf_fail_at(ld, v[SP_SLEEP], "sleep: wol can only wake (use http or command)");
        } else {
            sp->sleep = (enum dm_power_act)a;
        }
    }
    const char *who = s->name != NULL ? s->name : "?";
    if (sp->wake == DM_ACT_WOL && !sp->has_mac) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": wake: wol needs \"mac\"", p->name, who);
    }
    if ((sp->wake == DM_ACT_HTTP || sp->sleep == DM_ACT_HTTP) && sp->control.text == NULL) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": http actuator needs \"control\"",
                        p->name, who);
    }
    if (sp->wake == DM_ACT_COMMAND && sp->wake_command == NULL) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": wake: command needs \"wake_command\"",
                        p->name, who);
    }
    if (sp->sleep == DM_ACT_COMMAND && sp->sleep_command == NULL) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": sleep: command needs \"sleep_command\"",
                        p->name, who);
    }
}

void
dm_conf_server_power_defaults(struct dm_conf_server_power *sp)
{
    *sp =
        (struct dm_conf_server_power){ .idle_w = 40, .full_w = -1, .asleep_w = 3, .booting_w = -1 };
}

/*
 * Fills what a server's power block left to its pool (full_w, booting_w,
 * agent), and checks that its power grows with its use: asleep <= idle <=
 * full (n, its power block or the server, is where an error points).
 */
void
dm_conf_server_power_finish(struct dm_conf_loader *ld, const struct dm_conf_pool *p,
                            struct dm_conf_server *s, const yaml_node_t *n)
{
    struct dm_conf_server_power *sp = &s->power;
    bool own_full = sp->full_w >= 0;
    if (!own_full) {
        sp->full_w = p->power.full_w;
    }
    if (sp->booting_w < 0) {
        sp->booting_w = sp->full_w;
    }
    const char *who = s->name != NULL ? s->name : "?";
    if (sp->idle_w > sp->full_w) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": idle_w %g is above full_w %g%s",
                        p->name, who, sp->idle_w, sp->full_w, own_full ? "" : " (the pool's)");
    } else if (sp->asleep_w > sp->idle_w) {
        dm_conf_fail_at(ld, n, "pool \"%s\": server \"%s\": asleep_w %g is above idle_w %g",
                        p->name, who, sp->asleep_w, sp->idle_w);
    }
    if (sp->wol_to.text == NULL && sp->wake == DM_ACT_WOL) {
        (void)dm_conf_parse_addr("255.255.255.255:9", &sp->wol_to);
    }
    if (sp->agent == NULL && s->name != NULL && is_agent_name(s->name)) {
        sp->agent = dm_conf_dup_str(ld, s->name);
    }
}

/* Reads a secret file: its bytes, final newlines dropped; false after reporting. */
static bool
get_secret(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, uint8_t **out,
           size_t *out_len)
{
    const char *path = dm_conf_get_text(ld, n, "a path");
    char buf[DM_CONF_SHOW_BUF];
    if (path == NULL) {
        return false;
    }
    /* The agents' reader (power/report.h): a regular file, never waited on,
     * its final newlines dropped; one byte spare for a token's NUL. */
    uint8_t *b = malloc(DM_REPORT_KEY_MAX + 1);
    if (b == NULL) {
        ld->oom = true;
        return false;
    }
    size_t len = 0;
    int err = dm_report_key_read(path, b, &len);
    if (err < 0) {
        dm_conf_fail_at(ld, n, "%s %s: %s", key,
                        dm_conf_quote(path, strlen(path), buf, sizeof(buf)),
                        err == -EINVAL  ? "empty"
                        : err == -EFBIG ? "longer than 256 bytes"
                                        : dm_report_key_error(err));
        free(b);
        return false;
    }
    free(*out);
    *out = b;
    *out_len = len;
    return true;
}

/* A bearer token's file: its bytes without final newlines, printable ASCII
 * without spaces (it goes in a header); false after reporting. */
static bool
get_token(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, char **out)
{
    uint8_t *tok = NULL;
    size_t len = 0;
    if (!get_secret(ld, n, key, &tok, &len)) {
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < len; i++) {
        ok = ok && tok[i] > 0x20 && tok[i] < 0x7f;
    }
    if (!ok) {
        dm_conf_fail_at(ld, n, "%s: the token must be printable ASCII, no spaces", key);
        free(tok);
        return false;
    }
    free(*out);
    *out = (char *)tok;
    (*out)[len] = 0; /* the buffer has room: DM_REPORT_KEY_MAX + 1 */
    return true;
}

enum { TP_METRICS, TP_KEY_FILE, TP_MAX_AGE, TP_ADMIN_TOKEN, TP_TOKEN_READS, TP_N };
static const char *const top_power_keys[TP_N] = {
    [TP_METRICS] = "metrics",
    [TP_KEY_FILE] = "key_file",
    [TP_MAX_AGE] = "report_max_age",
    [TP_ADMIN_TOKEN] = "admin_token_file",
    [TP_TOKEN_READS] = "admin_token_reads",
};

void
dm_conf_load_power(struct dm_conf_loader *ld, const yaml_node_t *n)
{
    struct dm_conf *c = ld->c;
    yaml_node_t *v[TP_N];
    if (!dm_conf_walk(ld, n, true, top_power_keys, TP_N, v)) {
        return;
    }
    if (v[TP_METRICS] != NULL) {
        (void)dm_conf_get_addr(ld, v[TP_METRICS], true, &c->metrics);
    }
    if (v[TP_KEY_FILE] != NULL) {
        (void)get_secret(ld, v[TP_KEY_FILE], "key_file", &c->metrics_key, &c->metrics_key_len);
    }
    if (v[TP_MAX_AGE] != NULL) {
        (void)dm_conf_get_duration(ld, v[TP_MAX_AGE], "report_max_age", false,
                                   &c->report_max_age_ms);
    }
    if (v[TP_ADMIN_TOKEN] != NULL) {
        (void)get_token(ld, v[TP_ADMIN_TOKEN], "admin_token_file", &c->admin_token);
    }
    if (v[TP_TOKEN_READS] != NULL &&
        dm_conf_get_bool(ld, v[TP_TOKEN_READS], &c->admin_token_reads) && c->admin_token_reads &&
        v[TP_ADMIN_TOKEN] == NULL) {
        dm_conf_fail_at(ld, v[TP_TOKEN_READS],
                        "power: admin_token_reads needs admin_token_file (the token to ask for)");
    }
    if (c->metrics.text != NULL && v[TP_KEY_FILE] == NULL) {
        dm_conf_fail_at(ld, n, "power: metrics needs key_file (reports are signed with it)");
    }
}

/* A server of the config, for the checks across pools: its pool, its place. */
struct server_ref {
    const struct dm_conf_pool *pool;
    const struct dm_conf_server *s;
    size_t order; /* in the file: pool by pool, server by server */
};

static int
addr_cmp(const struct dm_conf_server *x, const struct dm_conf_server *y)
{
    if (x->addr.salen != y->addr.salen) {
        return x->addr.salen < y->addr.salen ? -1 : 1;
    }
    return memcmp(&x->addr.sa, &y->addr.sa, x->addr.salen);
}

static int
ref_cmp_addr(const void *a, const void *b)
{
    const struct server_ref *x = a, *y = b;
    return dm_conf_cmp_then(addr_cmp(x->s, y->s), x->order, y->order);
}

/* Where the file has server s. */
static yaml_mark_t
server_mark(const struct dm_conf_server *s)
{
    return (yaml_mark_t){ .line = s->at.line, .column = s->at.column };
}

static int
ref_cmp_agent(const void *a, const void *b)
{
    const struct server_ref *x = a, *y = b;
    return dm_conf_cmp_then(strcmp(x->s->power.agent, y->s->power.agent), x->order, y->order);
}

/*
 * The checks across pools, once every pool is loaded: a power-managed
 * pool's servers are its own (sleeping one would starve another pool), and
 * every agent name names one server. Sorted, not pair by pair: a file of
 * 20,000 servers is checked in milliseconds, and each server that breaks a
 * rule is named once, against the first it clashes with.
 */
void
dm_conf_check_power(struct dm_conf_loader *ld)
{
    struct dm_conf *c = ld->c;
    size_t n = 0, nagents = 0;
    bool any = false;
    for (size_t i = 0; i < c->npools; i++) {
        n += c->pools[i].nservers;
        any = any || c->pools[i].power.enabled;
    }
    if (!any || n == 0) {
        return;
    }
    struct server_ref *refs = calloc(n, sizeof(*refs));
    struct server_ref *agents = calloc(n, sizeof(*agents));
    if (refs == NULL || agents == NULL) {
        ld->oom = true;
        free(refs);
        free(agents);
        return;
    }
    size_t nrefs = 0;
    for (size_t i = 0, order = 0; i < c->npools; i++) {
        const struct dm_conf_pool *p = &c->pools[i];
        for (size_t j = 0; j < p->nservers; j++, order++) {
            struct server_ref r = { .pool = p, .s = &p->servers[j], .order = order };
            if (r.s->addr.text != NULL) {
                refs[nrefs++] = r;
            }
            if (p->power.enabled && r.s->power.agent != NULL) {
                agents[nagents++] = r;
            }
        }
    }
    qsort(refs, nrefs, sizeof(*refs), ref_cmp_addr);
    for (size_t g = 0; g < nrefs;) {
        /* refs[g, e): one address, in file order. */
        size_t e = g + 1;
        while (e < nrefs && addr_cmp(refs[g].s, refs[e].s) == 0) {
            e++;
        }
        const struct server_ref *powered = NULL; /* the first of a power pool so far */
        for (size_t k = g; k < e; k++) {
            const struct server_ref *b = &refs[k];
            const struct server_ref *s = NULL, *t = NULL;
            if (k > g && b->pool->power.enabled) {
                /* Named as before: a power pool's server first, the earlier one. */
                bool first = refs[g].pool->power.enabled;
                s = first ? &refs[g] : b, t = first ? b : &refs[g];
            } else if (powered != NULL) {
                s = powered, t = b;
            }
            if (s != NULL) {
                const struct server_ref *later = s->order > t->order ? s : t;
                dm_conf_fail_mark(ld, server_mark(later->s),
                                  "pool \"%s\": server \"%s\" (%s) is also server \"%s\" of pool "
                                  "\"%s\": a power-managed pool's servers must be its own",
                                  s->pool->name, s->s->name, s->s->addr.text, t->s->name,
                                  t->pool->name);
            }
            if (powered == NULL && b->pool->power.enabled) {
                powered = b;
            }
        }
        g = e;
    }
    qsort(agents, nagents, sizeof(*agents), ref_cmp_agent);
    for (size_t k = 1, first = 0; k < nagents; k++) {
        if (strcmp(agents[first].s->power.agent, agents[k].s->power.agent) != 0) {
            first = k;
        } else {
            dm_conf_fail_mark(ld, server_mark(agents[k].s),
                              "agent name \"%s\" is used by server \"%s\" and \"%s\"",
                              agents[k].s->power.agent, agents[first].s->name, agents[k].s->name);
        }
    }
    free(refs);
    free(agents);
}
