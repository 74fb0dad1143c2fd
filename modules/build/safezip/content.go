package safezip

import (
	"archive/zip"
	"compress/flate"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// content reads an entry's data as it really inflates, whatever its header
// declares: archive/zip stops at the declared size, which would hide how
// large a zip bomb that lies about its sizes is. At the end of the data it
// fails with an *Error when the size or the checksum differ from the header,
// as archive/zip would.
type content struct {
	zf   *zip.File
	r    io.Reader
	n    uint64
	hash hash.Hash32
}

// openContent returns the reader of zf's data. Only Store and Deflate
// entries get here (checkReadable).
func openContent(zf *zip.File) (*content, error) {
	raw, err := zf.OpenRaw()
	if err != nil {
		return nil, corruptEntry(zf.Name, err)
	}
	c := &content{zf: zf, r: raw, hash: crc32.NewIEEE()}
	if zf.Method == zip.Deflate {
		c.r = flate.NewReader(raw)
	}
	return c, nil
}

func (c *content) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += uint64(n)
	c.hash.Write(p[:n])
	switch {
	case err == io.EOF:
		return n, c.verify()
	case err == io.ErrUnexpectedEOF || errors.As(err, new(flate.CorruptInputError)):
		return n, corruptEntry(c.zf.Name, err)
	}
	return n, err
}

// verify compares what came out with the header.
func (c *content) verify() error {
	declared := c.zf.UncompressedSize64
	switch {
	case c.n > declared:
		return &Error{Kind: ErrUnsafeEntry, Entry: c.zf.Name, Err: zip.ErrFormat,
			Reason: fmt.Sprintf("content is larger than the %s its header declares (zip bomb?)", formatSize(int64(declared)))}
	case c.n < declared:
		return corruptEntry(c.zf.Name, fmt.Errorf("%s of data where the header declares %s", formatSize(int64(c.n)), formatSize(int64(declared))))
	case c.zf.CRC32 != 0 && c.hash.Sum32() != c.zf.CRC32:
		return corruptEntry(c.zf.Name, zip.ErrChecksum)
	}
	return io.EOF
}

// checkContent inflates every file, counting the bytes against
// MaxExtractedBytes as Extract does, so that Check refuses what Extract would.
func (p *plan) checkContent(lim Limits) error {
	left := lim.MaxExtractedBytes
	for _, n := range p.files {
		written, err := copyEntry(io.Discard, n.zf, left, lim.MaxExtractedBytes)
		left -= written
		if err != nil {
			return err
		}
	}
	return nil
}

// copyEntry copies the inflated data of zf to dst, as copyContent does.
func copyEntry(dst io.Writer, zf *zip.File, left, limit int64) (int64, error) {
	c, err := openContent(zf)
	if err != nil {
		return 0, err
	}
	return copyContent(dst, c, zf, left, limit)
}

// archiveReader remembers the errors of reading the archive, so that a
// failing disk is not reported as a corrupt upload.
type archiveReader struct {
	r   io.ReaderAt
	err error
}

func (a *archiveReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := a.r.ReadAt(p, off)
	if err != nil && err != io.EOF && a.err == nil {
		a.err = err
	}
	return n, err
}

// failed returns err, or, when reading the archive failed, an error that
// says so instead: whatever err makes of the missing data is not the
// archive's fault.
func (a *archiveReader) failed(err error) error {
	if err != nil && a.err != nil {
		return fmt.Errorf("safezip: reading the archive: %w", a.err)
	}
	return err
}
