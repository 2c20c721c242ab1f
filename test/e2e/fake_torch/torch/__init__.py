# A stand-in for torch in the e2e tests (test/e2e/torch_timeout.sh, py_stall.py): torch.distributed's API shape only.
