#include "CCurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    CURLcode (*global_init)(long);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLcode (*easy_pause)(CURL *, int);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd[], unsigned int, int, int *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLcode (*easy_perform)(CURL *);
    void (*easy_reset)(CURL *);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    curl_version_info_data *(*version_info)(CURLversion);
} curl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[256];

#define BIND(field, symbol) \
    if (!(*(void **)&curl.field = dlsym(lib, symbol))) { \
        snprintf(load_error, sizeof load_error, "libcurl has no %s", symbol); \
        return; \
    }

static void load(void) {
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
    BIND(global_init, "curl_global_init")
    BIND(easy_setopt, "curl_easy_setopt")
    BIND(easy_getinfo, "curl_easy_getinfo")
    BIND(easy_pause, "curl_easy_pause")
    BIND(multi_setopt, "curl_multi_setopt")
    BIND(easy_init, "curl_easy_init")
    BIND(easy_cleanup, "curl_easy_cleanup")
    BIND(easy_strerror, "curl_easy_strerror")
    BIND(multi_init, "curl_multi_init")
    BIND(multi_cleanup, "curl_multi_cleanup")
    BIND(multi_add_handle, "curl_multi_add_handle")
    BIND(multi_remove_handle, "curl_multi_remove_handle")
    BIND(multi_perform, "curl_multi_perform")
    BIND(multi_poll, "curl_multi_poll")
    BIND(multi_wakeup, "curl_multi_wakeup")
    BIND(multi_info_read, "curl_multi_info_read")
    BIND(easy_perform, "curl_easy_perform")
    BIND(easy_reset, "curl_easy_reset")
    BIND(slist_append, "curl_slist_append")
    BIND(slist_free_all, "curl_slist_free_all")
    BIND(version_info, "curl_version_info")
    if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(load_error, sizeof load_error, "curl_global_init failed");
    }
}

int ccurl_load(char *error, size_t error_size) {
    pthread_once(&load_once, load);
    if (load_error[0]) {
        snprintf(error, error_size, "%s", load_error);
        return -1;
    }
    return 0;
}

CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_set_protocols(CURL *handle, int redirects, const char *names, long bitmask) {
    CURLcode code = curl.easy_setopt(handle, redirects ? CURLOPT_REDIR_PROTOCOLS_STR : CURLOPT_PROTOCOLS_STR, names);
    if (code != CURLE_UNKNOWN_OPTION) return code;
    // libcurl before 7.85.0: the bitmask options, deprecated since, are the ones it has.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return curl.easy_setopt(handle, redirects ? CURLOPT_REDIR_PROTOCOLS : CURLOPT_PROTOCOLS, bitmask);
#pragma GCC diagnostic pop
}
CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_setopt_callback(CURL *handle, CURLoption option, ccurl_data_callback value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_setopt_xferinfo(CURL *handle, CURLoption option, ccurl_xferinfo_callback value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value) {
    return curl.easy_setopt(handle, option, value);
}
CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl.easy_setopt(handle, option, value);
}
CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl.multi_setopt(handle, option, value);
}
CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl.easy_getinfo(handle, info, value);
}
CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl.easy_getinfo(handle, info, value);
}
CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl.easy_getinfo(handle, info, value);
}

CURL *ccurl_easy_init(void) { return curl.easy_init(); }
CURLcode ccurl_easy_pause(CURL *handle, int bitmask) { return curl.easy_pause(handle, bitmask); }
void ccurl_easy_cleanup(CURL *handle) { curl.easy_cleanup(handle); }
const char *ccurl_easy_strerror(CURLcode code) { return curl.easy_strerror(code); }
CURLM *ccurl_multi_init(void) { return curl.multi_init(); }
CURLMcode ccurl_multi_cleanup(CURLM *multi) { return curl.multi_cleanup(multi); }
CURLMcode ccurl_multi_add_handle(CURLM *multi, CURL *handle) { return curl.multi_add_handle(multi, handle); }
CURLMcode ccurl_multi_remove_handle(CURLM *multi, CURL *handle) { return curl.multi_remove_handle(multi, handle); }
CURLMcode ccurl_multi_perform(CURLM *multi, int *running) { return curl.multi_perform(multi, running); }
CURLMcode ccurl_multi_poll(CURLM *multi, int timeout_ms) { return curl.multi_poll(multi, NULL, 0, timeout_ms, NULL); }
CURLMcode ccurl_multi_wakeup(CURLM *multi) { return curl.multi_wakeup(multi); }
CURLMsg *ccurl_multi_info_read(CURLM *multi, int *left) { return curl.multi_info_read(multi, left); }
CURLcode ccurl_easy_perform(CURL *handle) { return curl.easy_perform(handle); }
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *value) { return curl.slist_append(list, value); }
void ccurl_slist_free_all(struct curl_slist *list) { curl.slist_free_all(list); }
void ccurl_easy_reset(CURL *handle) { curl.easy_reset(handle); }
const curl_version_info_data *ccurl_version_info(void) {
    return curl.version_info ? curl.version_info(CURLVERSION_NOW) : NULL;
}
