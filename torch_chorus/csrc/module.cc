// torch_chorus._C: the chorus process group for Python. torch_chorus/__init__.py
// registers its constructor as torch.distributed backend "chorus".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "torch_chorus/csrc/process_group.h"

namespace py = pybind11;

#ifndef TORCH_CHORUS_TORCH_VERSION  // set by the Bazel build (third_party/torch)
#define TORCH_CHORUS_TORCH_VERSION "unknown"
#endif

PYBIND11_MODULE(_C, m) {
  m.doc() = "chorus collectives as a torch.distributed backend";
  // The base class is torch's, registered by torch._C._distributed_c10d (imported
  // first by torch_chorus/__init__.py).
  py::class_<torch_chorus::ProcessGroupChorus, torch_chorus::BackendBase,
             c10::intrusive_ptr<torch_chorus::ProcessGroupChorus>>(m, "ProcessGroupChorus")
      .def(py::init(
               [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<torch_chorus::ProcessGroupChorus>(store, rank, size, timeout);
               }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &torch_chorus::ProcessGroupChorus::Describe);
  m.attr("torch_version") = TORCH_CHORUS_TORCH_VERSION;
}
