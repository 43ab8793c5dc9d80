// gcs-front terminates TLS in front of fake-gcs-server for TensorFlow's GCS client, and
// drops the one header that client sends which Go's HTTP server refuses: for a POST or
// PUT with an empty body (starting a resumable upload, a rewrite for rename) TensorFlow's
// libcurl request adds "Transfer-Encoding: identity", and net/http answers 501
// "Unsupported transfer encoding" before fake-gcs-server sees the request. It adds
// "X-Forwarded-Proto: https", so the upload URLs fake-gcs-server hands out (built from the
// request) say https, as the client's did. Everything else passes through byte for byte: request heads are read line by line, bodies by
// Content-Length (a chunked body passes the rest of the connection through unchanged),
// responses are copied back raw. A test stand-in, used by tests/cluster/kind-fake-gcs.sh
// and tests/e2e/test_fake_gcs.py; it must not be used for anything real.
package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
)

func main() {
	listen := flag.String("listen", ":443", "address to serve TLS on")
	cert := flag.String("cert", "", "server certificate (PEM)")
	key := flag.String("key", "", "server key (PEM)")
	upstream := flag.String("upstream", "127.0.0.1:4443", "fake-gcs-server's plain HTTP address")
	flag.Parse()
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("gcs-front: %v", err)
	}
	ln, err := tls.Listen("tcp", *listen, &tls.Config{
		Certificates: []tls.Certificate{pair},
		NextProtos:   []string{"http/1.1"}, // never HTTP/2: heads are parsed as HTTP/1.1
	})
	if err != nil {
		log.Fatalf("gcs-front: %v", err)
	}
	log.Printf("gcs-front: TLS on %s -> http://%s", *listen, *upstream)
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Printf("gcs-front: accept: %v", err)
			continue
		}
		go serve(c, *upstream)
	}
}

func serve(client net.Conn, upstreamAddr string) {
	defer client.Close()
	up, err := net.Dial("tcp", upstreamAddr)
	if err != nil {
		log.Printf("gcs-front: upstream: %v", err)
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(client, up)
		client.Close()
	}()
	r := bufio.NewReaderSize(client, 64<<10)
	for {
		length, chunked, err := copyHead(up, r)
		if err != nil {
			return
		}
		if chunked {
			_, _ = io.Copy(up, r)
			return
		}
		if length > 0 {
			if _, err := io.CopyN(up, r, length); err != nil {
				return
			}
		}
	}
}

// copyHead forwards one request head without "Transfer-Encoding: identity" and returns
// its body's framing.
func copyHead(w io.Writer, r *bufio.Reader) (length int64, chunked bool, err error) {
	var head strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, false, err
		}
		name, value, _ := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		name, value = strings.ToLower(strings.TrimSpace(name)), strings.ToLower(strings.TrimSpace(value))
		switch {
		case name == "transfer-encoding" && value == "identity", name == "x-forwarded-proto":
			continue
		case name == "transfer-encoding" && strings.Contains(value, "chunked"):
			chunked = true
		case name == "content-length":
			length, _ = strconv.ParseInt(value, 10, 64)
		}
		if line == "\r\n" || line == "\n" {
			head.WriteString("X-Forwarded-Proto: https\r\n\r\n")
			_, err = io.WriteString(w, head.String())
			return length, chunked, err
		}
		head.WriteString(line)
	}
}
