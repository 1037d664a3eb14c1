// Readiness of an fd on Node's own event loop (uv_poll): no thread per connection, no spinning.
// This is the only kernel-facing piece that must know about libuv and Node-API.
#pragma once

#include <napi.h>
#include <uv.h>

namespace ana {

class FdPoller : public Napi::ObjectWrap<FdPoller> {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit FdPoller(const Napi::CallbackInfo& info);
  ~FdPoller() override;

 private:
  Napi::Value Start(const Napi::CallbackInfo& info);
  Napi::Value Stop(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  static void OnEvent(uv_poll_t* handle, int status, int events);
  void CloseHandle();

  uv_poll_t* handle_ = nullptr;
  Napi::FunctionReference callback_;
};

}  // namespace ana
