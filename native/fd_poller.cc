#include "fd_poller.h"

namespace ana {

Napi::Function FdPoller::Define(Napi::Env env) {
  return DefineClass(env, "FdPoller",
                     {InstanceMethod<&FdPoller::Start>("start"), InstanceMethod<&FdPoller::Stop>("stop"),
                      InstanceMethod<&FdPoller::Close>("close"), InstanceMethod<&FdPoller::Ref>("ref"),
                      InstanceMethod<&FdPoller::Unref>("unref")});
}

FdPoller::FdPoller(const Napi::CallbackInfo& info) : Napi::ObjectWrap<FdPoller>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsFunction()) {
    throw Napi::TypeError::New(env, "new FdPoller(fd, callback(status, events))");
  }
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) throw Napi::Error::New(env, "no event loop");
  handle_ = new uv_poll_t();
  int rc = uv_poll_init(loop, handle_, info[0].As<Napi::Number>().Int32Value());
  if (rc != 0) {
    delete handle_;
    handle_ = nullptr;
    Napi::Error err = Napi::Error::New(env, std::string(uv_err_name(rc)) + ": " + uv_strerror(rc) + ", uv_poll_init");
    err.Set("code", uv_err_name(rc));
    err.Set("errno", Napi::Number::New(env, rc));
    err.Set("syscall", "uv_poll_init");
    throw err;
  }
  handle_->data = this;
  callback_ = Napi::Persistent(info[1].As<Napi::Function>());
}

FdPoller::~FdPoller() { CloseHandle(); }

void FdPoller::CloseHandle() {
  if (!handle_) return;
  handle_->data = nullptr;
  uv_close(reinterpret_cast<uv_handle_t*>(handle_), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
  handle_ = nullptr;
}

void FdPoller::OnEvent(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<FdPoller*>(handle->data);
  if (!self) return;
  Napi::Env env = self->Env();
  Napi::HandleScope scope(env);
  // Keep the wrapper alive while JS runs: the callback may close and drop it.
  Napi::Object keep = self->Value();
  try {
    self->callback_.MakeCallback(keep, {Napi::Number::New(env, status), Napi::Number::New(env, events)});
  } catch (const Napi::Error& e) {
    // An exception from a libuv callback has nowhere to go but Node's uncaught handler.
    napi_fatal_exception(env, e.Value());
  }
}

Napi::Value FdPoller::Start(const Napi::CallbackInfo& info) {
  if (!handle_) throw Napi::Error::New(info.Env(), "FdPoller is closed");
  int events = info[0].IsNumber() ? info[0].As<Napi::Number>().Int32Value() : UV_READABLE;
  int rc = uv_poll_start(handle_, events & (UV_READABLE | UV_WRITABLE | UV_DISCONNECT), OnEvent);
  if (rc != 0) throw Napi::Error::New(info.Env(), std::string("uv_poll_start: ") + uv_strerror(rc));
  return info.Env().Undefined();
}

Napi::Value FdPoller::Stop(const Napi::CallbackInfo& info) {
  if (handle_) uv_poll_stop(handle_);
  return info.Env().Undefined();
}

Napi::Value FdPoller::Close(const Napi::CallbackInfo& info) {
  CloseHandle();
  callback_.Reset();
  return info.Env().Undefined();
}

Napi::Value FdPoller::Ref(const Napi::CallbackInfo& info) {
  if (handle_) uv_ref(reinterpret_cast<uv_handle_t*>(handle_));
  return info.Env().Undefined();
}

Napi::Value FdPoller::Unref(const Napi::CallbackInfo& info) {
  if (handle_) uv_unref(reinterpret_cast<uv_handle_t*>(handle_));
  return info.Env().Undefined();
}

}  // namespace ana
