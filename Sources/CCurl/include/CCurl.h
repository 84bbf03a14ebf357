// CCurl: typed, non-variadic wrappers over libcurl, bound at first use.
//
// Why it exists: curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are C
// variadic functions, which Swift cannot call; each wrapper below fixes one
// argument type. And libcurl pulls in a large tree of shared libraries (TLS, LDAP,
// GSSAPI, SSH, IDN…) whose loading costs several milliseconds at every process
// start; launchers call PatchSync before every game start and most calls never
// transfer anything, so libcurl is loaded with dlopen by ccurl_load() on first use
// instead of being linked. Every other function here is libcurl's, called through
// the pointer that ccurl_load() found.
#ifndef CCURL_H
#define CCURL_H

#include <curl/curl.h>
#include <stddef.h>

typedef size_t (*ccurl_data_callback)(char *data, size_t size, size_t count, void *userdata);
typedef int (*ccurl_xferinfo_callback)(void *userdata, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);

/// Loads libcurl (libcurl.so.4) and calls curl_global_init once; thread-safe.
/// Returns 0 on success, or -1 with a message in `error`.
int ccurl_load(char *error, size_t error_size);

/// curl_easy_setopt with a long argument.
CURLcode ccurl_easy_setopt_long(CURL *handle, CURLoption option, long value);
/// curl_easy_setopt with a string argument (libcurl copies it).
CURLcode ccurl_easy_setopt_string(CURL *handle, CURLoption option, const char *value);
/// Restricts the protocols a transfer (`redirects` 0) or its redirects (`redirects` 1) may use:
/// CURLOPT_PROTOCOLS_STR / CURLOPT_REDIR_PROTOCOLS_STR with `names` ("http,https"), or on a libcurl
/// older than 7.85.0, which does not know those, the older CURLOPT_PROTOCOLS / CURLOPT_REDIR_PROTOCOLS
/// with the same protocols as the CURLPROTO_* `bitmask`. Returns what the option that took effect returned.
CURLcode ccurl_easy_set_protocols(CURL *handle, int redirects, const char *names, long bitmask);
/// curl_easy_setopt with a pointer argument (WRITEDATA, HEADERDATA, PRIVATE).
CURLcode ccurl_easy_setopt_pointer(CURL *handle, CURLoption option, void *value);
/// curl_easy_setopt with a data callback (WRITEFUNCTION, HEADERFUNCTION).
CURLcode ccurl_easy_setopt_callback(CURL *handle, CURLoption option, ccurl_data_callback value);
/// curl_easy_setopt with a progress callback (XFERINFOFUNCTION).
CURLcode ccurl_easy_setopt_xferinfo(CURL *handle, CURLoption option, ccurl_xferinfo_callback value);
/// curl_easy_setopt with a curl_off_t argument (INFILESIZE_LARGE).
CURLcode ccurl_easy_setopt_off_t(CURL *handle, CURLoption option, curl_off_t value);
/// curl_easy_setopt with a header list (HTTPHEADER); the list must outlive the transfer.
CURLcode ccurl_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value);
/// curl_multi_setopt with a long argument.
CURLMcode ccurl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
/// curl_easy_getinfo for a long result.
CURLcode ccurl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
/// curl_easy_getinfo for a pointer result (CURLINFO_PRIVATE).
CURLcode ccurl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);
/// curl_easy_getinfo for a curl_off_t result (the *_TIME_T timings, in microseconds).
CURLcode ccurl_easy_getinfo_off_t(CURL *handle, CURLINFO info, curl_off_t *value);

/// curl_version_info(CURLVERSION_NOW): the loaded libcurl's own version (`version_num`, 0x074b00 for
/// 7.75.0, and the text `version`), which may be older than this header's: read those two fields only.
/// NULL before ccurl_load() bound it.
const curl_version_info_data *ccurl_version_info(void);
/// curl_easy_init.
CURL *ccurl_easy_init(void);
/// curl_easy_pause (CURLPAUSE_CONT resumes a transfer whose write callback paused it).
CURLcode ccurl_easy_pause(CURL *handle, int bitmask);
/// The write callback's return value that pauses a transfer (CURL_WRITEFUNC_PAUSE).
static const size_t ccurl_writefunc_pause = CURL_WRITEFUNC_PAUSE;
/// curl_easy_pause's bitmask that resumes both directions (CURLPAUSE_CONT).
static const int ccurl_pause_cont = CURLPAUSE_CONT;
/// curl_easy_cleanup.
void ccurl_easy_cleanup(CURL *handle);
/// curl_easy_strerror.
const char *ccurl_easy_strerror(CURLcode code);
/// curl_multi_init.
CURLM *ccurl_multi_init(void);
/// curl_multi_cleanup.
CURLMcode ccurl_multi_cleanup(CURLM *multi);
/// curl_multi_add_handle.
CURLMcode ccurl_multi_add_handle(CURLM *multi, CURL *handle);
/// curl_multi_remove_handle.
CURLMcode ccurl_multi_remove_handle(CURLM *multi, CURL *handle);
/// curl_multi_perform.
CURLMcode ccurl_multi_perform(CURLM *multi, int *running);
/// curl_multi_poll without extra descriptors.
CURLMcode ccurl_multi_poll(CURLM *multi, int timeout_ms);
/// curl_multi_wakeup.
CURLMcode ccurl_multi_wakeup(CURLM *multi);
/// curl_multi_info_read.
CURLMsg *ccurl_multi_info_read(CURLM *multi, int *left);
/// curl_easy_perform: one blocking transfer (the uploader's workers, each with its own handle).
CURLcode ccurl_easy_perform(CURL *handle);
/// curl_easy_reset: options back to their defaults, the connection kept.
void ccurl_easy_reset(CURL *handle);
/// curl_slist_append.
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *value);
/// curl_slist_free_all.
void ccurl_slist_free_all(struct curl_slist *list);

#endif
