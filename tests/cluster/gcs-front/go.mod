module etj.dev/gcsfront

go 1.22
